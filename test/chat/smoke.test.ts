import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

describe("smoke: openai SDK through the gateway to a fake upstream", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway
  let client: OpenAI
  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({ providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } } })
    client = new OpenAI({ apiKey: "unused", baseURL: `${gateway.url}/v1`, maxRetries: 0 })
  })
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("non-stream", async () => {
    const res = await client.chat.completions.create({ model: "up/gpt-x", messages: [{ role: "user", content: "hi" }] })
    expect(res.choices[0].message.content).toBe("Hello from upstream")
    expect(upstream.requests.at(-1)?.body).toMatchObject({ model: "gpt-x", messages: [{ role: "user", content: "hi" }] })
    expect(upstream.requests.at(-1)?.headers.authorization).toBe("Bearer upstream-secret")
  })

  it("stream", async () => {
    const stream = await client.chat.completions.create({ model: "up/gpt-x", messages: [{ role: "user", content: "hi" }], stream: true })
    let text = ""
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? ""
    expect(text).toBe("Hello from upstream")
  })
})
