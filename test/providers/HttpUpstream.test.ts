/**
 * HttpUpstream against a real loopback server: `post` (head first, body read as the caller goes)
 * and `postWhole` (the whole answer in one suspension, for non-streamed calls), on what an upstream
 * may do: answer, fail with a status, cut the body, stall past the deadline.
 */
import { Context, Effect, Either, Exit, Layer, Scope } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { HttpUpstream } from "../../src/providers/HttpUpstream.js"

let server: Server
let url: string
let scope: Scope.CloseableScope
let upstream: HttpUpstream["Type"]

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      switch (req.url) {
        case "/ok":
          res.writeHead(200, { "content-type": "application/json" })
          return res.end('{"answer":42}')
        case "/refused":
          res.writeHead(429, { "content-type": "application/json", "retry-after": "7" })
          return res.end('{"error":"slow down"}')
        case "/refused-cut":
          // an error status whose body breaks off: the status is still the answer
          res.writeHead(500, { "content-type": "application/json", "content-length": "100" })
          res.write('{"error":')
          return setTimeout(() => res.socket?.destroy(), 20)
        case "/ok-cut":
          res.writeHead(200, { "content-type": "application/json", "content-length": "100" })
          res.write('{"answer":')
          return setTimeout(() => res.socket?.destroy(), 20)
        case "/stall":
          res.writeHead(200, { "content-type": "application/json" })
          return res.write('{"answer":')
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  scope = Effect.runSync(Scope.make())
  upstream = Context.get(await Effect.runPromise(Layer.buildWithScope(HttpUpstream.layerWith({ connections: 8 }), scope)), HttpUpstream)
})
afterAll(async () => {
  await Effect.runPromise(Scope.close(scope, Exit.void))
  server.closeAllConnections()
  await new Promise((resolve) => server.close(resolve))
})

const request = (path: string, deadlineMs = 5_000) => ({ url: `${url}${path}`, headers: { "content-type": "application/json" }, body: "{}", deadline: Date.now() + deadlineMs })

describe("HttpUpstream.postWhole", () => {
  it("a 200: status, headers and the whole body text", async () => {
    const whole = await Effect.runPromise(upstream.postWhole(request("/ok")))
    expect(whole.status).toBe(200)
    expect(whole.headers["content-type"]).toBe("application/json")
    expect(whole.text).toBe('{"answer":42}')
  })

  it("an error status: its body and headers (Retry-After) come back, not a failure", async () => {
    const whole = await Effect.runPromise(upstream.postWhole(request("/refused")))
    expect(whole).toMatchObject({ status: 429, text: '{"error":"slow down"}' })
    expect(whole.headers["retry-after"]).toBe("7")
  })

  it("an error status whose body breaks off: the status with empty text", async () => {
    const whole = await Effect.runPromise(upstream.postWhole(request("/refused-cut")))
    expect(whole).toMatchObject({ status: 500, text: "" })
  })

  it("a 200 whose body breaks off fails as a broken body", async () => {
    const result = await Effect.runPromise(Effect.either(upstream.postWhole(request("/ok-cut"))))
    expect(result).toEqual(Either.left("body"))
  })

  it("a body still arriving at the deadline fails as a timeout, soon after it", async () => {
    const started = performance.now()
    const result = await Effect.runPromise(Effect.either(upstream.postWhole(request("/stall", 200))))
    expect(result).toEqual(Either.left("timeout"))
    // generous backstop: the stall never ends, so only the 200 ms deadline can end the call
    expect(performance.now() - started).toBeLessThan(10_000)
  })

  it("a refused connection fails as unreachable", async () => {
    const result = await Effect.runPromise(Effect.either(upstream.postWhole({ ...request("/ok"), url: "http://127.0.0.1:1/ok" })))
    expect(result).toEqual(Either.left("connection"))
  })
})

describe("HttpUpstream.post", () => {
  it("the head first, then the body text", async () => {
    const text = await Effect.runPromise(Effect.flatMap(upstream.post(request("/ok")), (response) => (response.status === 200 ? response.text : Effect.fail("connection" as const))))
    expect(text).toBe('{"answer":42}')
  })
})
