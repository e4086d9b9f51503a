/**
 * Cost (issue 17): every usage record carries `costUsd` from the price of the model that answered
 * (the model's price, else its provider's); a model with no price has an unknown cost, counted in
 * `unpricedCalls` beside every cost total; `/gateway/metrics` has a cost counter by app and model.
 */
import { createHash } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const ADMIN = "admin-key-for-cost-0123456789"
const KEY = "sk-cost-team-key-0123456789"

describe("cost of model calls", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({
      adminKey: ADMIN,
      keys: [{ key: KEY, app: "team" }],
      providers: {
        mock: { type: "mock", price: { input: 1.25, output: 10 }, models: { special: { price: { input: 100, output: 200 } } } },
        free: { type: "mock" }
      }
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  const chat = async (model: string, text: string) => {
    const r = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: text }] })
    })
    expect(r.status).toBe(200)
    const body = (await r.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }
    return body.usage
  }

  it("is priced per model, then per provider; unpriced calls are counted, never costed at 0", async () => {
    const special = await chat("mock/special", "one two three four")
    const plain = await chat("mock/plain", "five six")
    await chat("free/anything", "seven")
    const expectedSpecial = (special.prompt_tokens * 100 + special.completion_tokens * 200) / 1e6
    const expectedPlain = (plain.prompt_tokens * 1.25 + plain.completion_tokens * 10) / 1e6
    const round6 = (n: number) => Math.round(n * 1e6) / 1e6

    type Totals = { requests: number; costUsd: number | null; unpricedCalls: number }
    let report:
      | { totals: Totals; days: Array<{ models: Array<Totals & { model: string }>; apps: Array<Totals & { app: string }>; keys: Array<Totals & { keyId: string }> }> }
      | undefined
    for (let i = 0; i < 50; i++) {
      const r = await fetch(`${gw.url}/gateway/usage?app=team`, { headers: { authorization: `Bearer ${ADMIN}` } })
      report = (await r.json()) as typeof report
      if (report!.totals.requests === 3) break
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    expect(report!.totals.requests).toBe(3)
    expect(report!.totals.costUsd).toBe(round6(expectedSpecial + expectedPlain))
    expect(report!.totals.unpricedCalls).toBe(1)
    const models = Object.fromEntries(report!.days[0].models.map((m) => [m.model, m]))
    expect(models["mock/special"]).toMatchObject({ costUsd: round6(expectedSpecial), unpricedCalls: 0 })
    expect(models["mock/plain"]).toMatchObject({ costUsd: round6(expectedPlain), unpricedCalls: 0 })
    // a group whose calls are all unpriced has no known cost: null, never 0
    expect(models["free/anything"]).toMatchObject({ costUsd: null, unpricedCalls: 1 })
    expect(report!.days[0].apps[0]).toMatchObject({ app: "team", costUsd: round6(expectedSpecial + expectedPlain), unpricedCalls: 1 })
    // per key: the key's id (never the key)
    const keyId = `key_${createHash("sha256").update(KEY).digest("hex").slice(0, 16)}`
    expect(report!.days[0].keys).toEqual([expect.objectContaining({ keyId, requests: 3, costUsd: round6(expectedSpecial + expectedPlain), unpricedCalls: 1 })])
    expect(JSON.stringify(report)).not.toContain(KEY)

    const metrics = await (await fetch(`${gw.url}/gateway/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text()
    const line = (model: string) => metrics.split("\n").find((l) => l.startsWith("gateway_cost_usd_total{") && l.includes(`model="${model}"`))
    expect(Number(line("mock/special")?.split(" ").pop())).toBeCloseTo(expectedSpecial, 12)
    expect(line("mock/special")).toContain('app="team"')
    expect(Number(line("mock/plain")?.split(" ").pop())).toBeCloseTo(expectedPlain, 12)
    expect(line("free/anything")).toBeUndefined()
  })
})
