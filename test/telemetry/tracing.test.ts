/**
 * Tracing: with `telemetry.otlpEndpoint` the gateway exports spans over OTLP/HTTP (JSON) — one
 * server span per request with the route label (never the URL or its query), a client span per
 * provider call inside it.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatJson, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

interface ExportedSpan {
  readonly name: string
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly kind: number
  readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: Record<string, unknown> }>
}

/** A fake OTLP/HTTP collector: every span it received, and the raw request bodies. */
const startCollector = async () => {
  const spans: Array<ExportedSpan> = []
  const bodies: Array<string> = []
  const server = http.createServer((req, res) => {
    let body = ""
    req.setEncoding("utf8")
    req.on("data", (c: string) => (body += c))
    req.on("end", () => {
      bodies.push(body)
      if (req.url === "/v1/traces" && (req.headers["content-type"] ?? "").includes("json")) {
        const parsed = JSON.parse(body) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<ExportedSpan> }> }> }
        for (const r of parsed.resourceSpans) for (const s of r.scopeSpans) spans.push(...s.spans)
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    bodies,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

const attr = (span: ExportedSpan, key: string) => span.attributes.find((a) => a.key === key)?.value

describe("tracing over OTLP", () => {
  let upstream: FakeUpstream
  let collector: Awaited<ReturnType<typeof startCollector>>
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    collector = await startCollector()
    gateway = await startGateway({
      keys: [{ key: "sk-trace-key-1", app: "traced" }],
      telemetry: { otlpEndpoint: collector.url },
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "k" } },
      aliases: { m: "up/model" }
    })
  })
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
    await collector?.close()
  })

  it("exports a server span per request with a provider span inside it, labelled by route", async () => {
    upstream.onRequest(() => chatJson({ content: "traced answer" }))
    const reply = await fetch(`${gateway.url}/v1/chat/completions?secret=query-value`, {
      method: "POST",
      headers: { authorization: "Bearer sk-trace-key-1", "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] })
    })
    expect(reply.status).toBe(200)
    await expect.poll(() => collector.spans.some((s) => s.name === "POST chat.completions"), { timeout: 8000, interval: 100 }).toBe(true)
    await expect.poll(() => collector.spans.some((s) => s.name === "provider.complete"), { timeout: 8000, interval: 100 }).toBe(true)
    const server = collector.spans.find((s) => s.name === "POST chat.completions")!
    const provider = collector.spans.find((s) => s.name === "provider.complete")!
    expect(provider.traceId).toBe(server.traceId)
    expect(provider.parentSpanId).toBe(server.spanId)
    expect(attr(server, "http.route")).toEqual({ stringValue: "chat.completions" })
    expect(attr(server, "gateway.app")).toEqual({ stringValue: "traced" })
    expect(attr(provider, "gateway.model")).toEqual({ stringValue: "up/model" })
    // neither the query nor the key ever reaches the collector
    const everything = collector.bodies.join("\n")
    expect(everything).not.toContain("query-value")
    expect(everything).not.toContain("sk-trace-key-1")
  })
})
