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
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> }
    expect(res.status).toBe(200)
    expect(body.choices[0].message.content).toBe("done")
    expect(res.headers.get("x-gateway-host-tool-calls")).toBe("1")
    expect(res.headers.get("x-gateway-session")?.split(",")).toHaveLength(2)
    const second = upstream.requests.at(-1)?.body as { messages: Array<{ role: string; content?: unknown; tool_call_id?: string }> }
    expect(second.messages.at(-1)).toEqual({ role: "tool", tool_call_id: "c1", content: "Echo: ping!" })
  }, 60_000)

  it("stream", async () => {
    upstream.script(chatSse({ content: "Let me add.", toolCalls: [{ id: "c1", name: "everything__get-sum", arguments: JSON.stringify({ a: 2, b: 3 }) }] }), chatSse({ content: "It is 5." }))
    const res = await post({ model: "up/m", stream: true, messages: [{ role: "user", content: "hi" }] })
    const text = await res.text()
    expect(res.status).toBe(200)
    let content = ""
    for (const line of text.split("\n")) {
      if (!line.startsWith("data: {")) continue
      const chunk = JSON.parse(line.slice(6)) as { choices: Array<{ delta: { content?: string; tool_calls?: unknown } }> }
      expect(chunk.choices[0]?.delta.tool_calls).toBeUndefined()
      content += chunk.choices[0]?.delta.content ?? ""
    }
    expect(content).toBe("Let me add.\n\nIt is 5.")
    const second = upstream.requests.at(-1)?.body as { messages: Array<{ role: string; content?: unknown }> }
    expect(second.messages.at(-1)).toMatchObject({ role: "tool", content: "The sum of 2 and 3 is 5." })
  }, 60_000)
})
