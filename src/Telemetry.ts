import { NodeSdk } from "@effect/opentelemetry"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http"
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Layer } from "effect"
import type { GatewayConfig } from "./Config.js"

/**
 * Tracing (`@effect/opentelemetry`): spans for each request, provider call and store operation,
 * exported over OTLP/HTTP (JSON) to `telemetry.otlpEndpoint` (e.g. `http://collector:4318`) in
 * batches. Without an endpoint no tracer is installed and the span wrappers are not even built
 * (`tracingEnabled`), so tracing costs nothing.
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
  return NodeSdk.layer(() => ({
    resource: { serviceName: "llm-gateway" },
    spanProcessor: new BatchSpanProcessor(new OTLPTraceExporter({ url: tracesUrl(endpoint) }), { scheduledDelayMillis: 1000 })
  })).pipe(Layer.discard) as Layer.Layer<never>
}
