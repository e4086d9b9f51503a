import { Effect, Layer } from "effect"
import type { GatewayConfig } from "./Config.js"

/**
 * Tracing (`@effect/opentelemetry`): spans for each request, provider call and store operation,
 * exported over OTLP/HTTP (JSON) to `telemetry.otlpEndpoint` (e.g. `http://collector:4318`) in
 * batches. Without an endpoint no tracer is installed and the span wrappers are not even built
 * (`tracingEnabled`), so tracing costs nothing; the OpenTelemetry packages are loaded only then
 * (they are a quarter of an idle gateway's memory).
 */
export const tracingEnabled = (config: GatewayConfig): boolean => config.telemetry?.otlpEndpoint !== undefined

/** The OTLP traces URL of an endpoint: `<endpoint>/v1/traces` unless the endpoint already names it. */
export const tracesUrl = (endpoint: string): string => {
  const base = endpoint.replace(/\/+$/, "")
  return base.endsWith("/v1/traces") ? base : `${base}/v1/traces`
}

export const telemetryLayer = (config: GatewayConfig): Layer.Layer<never> => {
  const endpoint = config.telemetry?.otlpEndpoint
  if (endpoint === undefined) return Layer.empty
  const load = Effect.promise(() =>
    Promise.all([import("@effect/opentelemetry/NodeSdk"), import("@opentelemetry/exporter-trace-otlp-http"), import("@opentelemetry/sdk-trace-base")])
  )
  return Layer.unwrapEffect(
    Effect.map(load, ([NodeSdk, { OTLPTraceExporter }, { BatchSpanProcessor }]) =>
      NodeSdk.layer(() => ({
        resource: { serviceName: "llm-gateway" },
        spanProcessor: new BatchSpanProcessor(new OTLPTraceExporter({ url: tracesUrl(endpoint) }), { scheduledDelayMillis: 1000 })
      }))
    )
  ).pipe(Layer.discard) as Layer.Layer<never>
}
