// Effect HttpClient (undici) vs undici.request directly, against a local instant server.
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { Effect, ManagedRuntime } from "effect"
import http from "node:http"
import { Agent, request } from "undici"

const body = JSON.stringify({ id: "x", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }] })
const server = http.createServer((req, res) => { req.resume(); req.on("end", () => { res.writeHead(200, { "content-type": "application/json" }); res.end(body) }) })
await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()))
const port = (server.address() as { port: number }).port
const url = `http://127.0.0.1:${port}/v1/chat/completions`
const payload = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] })

const run = async (name: string, n: number, conc: number, f: () => Promise<unknown>) => {
  for (let i = 0; i < 500; i++) await f()
  const t = performance.now()
  let left = n
  await Promise.all(Array.from({ length: conc }, async () => { while (left-- > 0) await f() }))
  console.log(name.padEnd(30), (n / ((performance.now() - t) / 1000)).toFixed(0), "req/s")
}
const agent = new Agent({ connections: 128 })
await run("undici.request", 20000, 32, async () => {
  const r = await request(url, { method: "POST", body: payload, headers: { "content-type": "application/json" }, dispatcher: agent })
  await r.body.text()
})
const rt = ManagedRuntime.make(NodeHttpClient.layerUndici)
const eff = Effect.flatMap(HttpClient.HttpClient, (c) => c.execute(HttpClientRequest.post(url).pipe(HttpClientRequest.bodyText(payload, "application/json")))).pipe(Effect.flatMap((r) => r.text))
await run("effect HttpClient", 20000, 32, () => rt.runPromise(eff))
const effNoTrace = eff.pipe(Effect.locally(HttpClient.currentTracerDisabledWhen, () => true), Effect.locally(HttpClient.currentTracerPropagation, false))
await run("effect HttpClient no tracer", 20000, 32, () => rt.runPromise(effNoTrace))
const effDirect = Effect.tryPromise({ try: async (signal) => { const r = await request(url, { method: "POST", body: payload, headers: { "content-type": "application/json" }, dispatcher: agent, signal }); return r.body.text() }, catch: (e) => e })
await run("tryPromise(undici)", 20000, 32, () => Effect.runPromise(effDirect))
server.close(); await agent.close(); await rt.dispose()
