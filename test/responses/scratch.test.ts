import { afterAll, beforeAll, it } from "vitest"
import { chatJson, chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { clientFor, gatewayDocument, post, parseSse, KEYS } from "./helpers.js"

let upstream: FakeUpstream
let gateway: TestGateway
beforeAll(async () => { upstream = await startFakeUpstream(); gateway = await startGateway(gatewayDocument(upstream.url)) })
afterAll(async () => { await gateway.close(); await upstream.close() })

it("explore", async () => {
  upstream.script(chatJson({ content: "Hello", usage: { prompt: 12, completion: 7, cached: 4, reasoning: 2 } }))
  const c = clientFor(gateway)
  const { data, response } = await c.responses.create({ model: "up/m", input: "hi", instructions: "be nice" }).withResponse()
  console.log(JSON.stringify(data, null, 1), [...response.headers])
  console.log(JSON.stringify(upstream.requests[0].body))
  upstream.script(chatSse({ content: "Hello there friend", reasoning: "think think", toolCalls: [{ id: "c1", name: "f", arguments: "{\"a\":1}" }] }))
  const raw = await post(gateway, { model: "up/m", input: "hi", stream: true, tools: [{ type: "function", name: "f", parameters: { type: "object" } }] }, KEYS.thinker)
  console.log(raw.status, [...raw.headers], raw.text.slice(0, 6000))
  const r = await c.responses.retrieve(data.id)
  console.log(JSON.stringify(r))
})
