import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatJson, chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const everything = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
const KEY = "sk-team-a-0123456789"

describe("host tools: smoke", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway
  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "team-a" }],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      toolServers: { everything: { command: [process.execPath, everything, "stdio"] } },
      apps: { "team-a": { hostTools: ["everything/echo", "everything/get-sum"] } }
    })
  }, 60_000)
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  const post = (body: unknown) =>
    fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" }, body: JSON.stringify(body) })

  it("whole", async () => {
    upstream.script(chatJson({ toolCalls: [{ id: "c1", name: "everything__echo", arguments: JSON.stringify({ message: "ping!" }) }] }), chatJson({ content: "done" }))
    const res = await post({ model: "up/m", messages: [{ role: "user", content: "hi" }] })
    const body = await res.json()
    console.log(res.status, JSON.stringify(body), res.headers.get("x-gateway-host-tool-calls"), res.headers.get("x-gateway-session"))
    console.log(JSON.stringify(upstream.requests.at(-2)?.body).slice(0, 3000))
    console.log(JSON.stringify(upstream.requests.at(-1)?.body).slice(0, 3000))
    expect(res.status).toBe(200)
  }, 60_000)

  it("stream", async () => {
    upstream.script(chatSse({ content: "Let me add.", toolCalls: [{ id: "c1", name: "everything__get-sum", arguments: JSON.stringify({ a: 2, b: 3 }) }] }), chatSse({ content: "It is 5." }))
    const res = await post({ model: "up/m", stream: true, messages: [{ role: "user", content: "hi" }] })
    console.log(res.status, await res.text())
    console.log(JSON.stringify(upstream.requests.at(-1)?.body).slice(0, 3000))
  }, 60_000)
})
