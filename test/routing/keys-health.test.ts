/**
 * Routing (issue 18, first part): several API keys of one provider are targets of their own,
 * taken in turn; a key answered 429 with `Retry-After: 2` rests for those 2 s while the other key
 * carries the traffic, then one call probes it and it takes its share again. Keys never appear
 * in answers.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { chatJson, openAiError, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { ADMIN, chat, get, parse, sleep } from "../gateway/helpers.js"

const KEY_A = "sk-upstream-key-a-0123456789"
const KEY_B = "sk-upstream-key-b-0123456789"
const CLIENT = "sk-routing-client-0123456789"

describe("apiKeys: each key a target, cooled down on its own", () => {
  let up: FakeUpstream
  let gw: TestGateway
  /** keys that answer 429 (Retry-After: 2) until removed */
  const limited = new Set<string>()
  beforeAll(async () => {
    up = await startFakeUpstream()
    up.onRequest((req) => {
      const key = String(req.headers.authorization ?? "").replace(/^Bearer /, "")
      if (limited.has(key)) {
        const refused = openAiError(429, "slow down", "rate_limit_error")
        return { ...refused, headers: { "retry-after": "2" } } as typeof refused
      }
      return chatJson({ content: key === KEY_A ? "from a" : "from b" })
    })
    gw = await startGateway({
      adminKey: ADMIN,
      keys: [{ key: CLIENT, app: "team" }],
      providers: { pool: { type: "openai", baseUrl: up.url, apiKeys: [KEY_A, KEY_B] } }
    })
  })
  afterAll(async () => {
    await gw?.close()
    await up?.close()
  })

  const answered = async () => {
    const r = await chat(gw, CLIENT, "pool/model")
    expect(r.status, r.text).toBe(200)
    expect(r.text).not.toContain(KEY_A)
    return ((parse(r).choices as Array<{ message: { content: string } }>)[0]).message.content
  }
  const keysUsed = (from: number) => up.requests.slice(from).map((r) => String(r.headers.authorization).slice(-14))

  it("spreads calls evenly over the keys", async () => {
    const seen = []
    for (let i = 0; i < 10; i++) seen.push(await answered())
    expect(seen.filter((s) => s === "from a")).toHaveLength(5)
    expect(seen.filter((s) => s === "from b")).toHaveLength(5)
  })

  it("a key answered 429 with Retry-After: 2 rests for 2 s while the other carries the traffic; then a probe brings it back", async () => {
    limited.add(KEY_A)
    const from = up.requests.length
    // every call is answered (by key b), whichever key its turn began with
    for (let i = 0; i < 6; i++) expect(await answered()).toBe("from b")
    // key a was asked once (its 429), then left alone while it rests
    expect(keysUsed(from).filter((k) => k === KEY_A.slice(-14))).toHaveLength(1)
    // the status page names the resting key by index, never the key
    const status = await get(gw, "/gateway/status", ADMIN)
    expect(parse(status).targets).toEqual([
      expect.objectContaining({ target: "pool/model#key0", state: "cooled", inFlight: 0 }),
      expect.objectContaining({ target: "pool/model#key1", state: "healthy", inFlight: 0, errorRate: 0 })
    ])
    expect(status.text).not.toContain(KEY_A)
    limited.delete(KEY_A)
    await sleep(2200)
    const after = []
    for (let i = 0; i < 6; i++) after.push(await answered())
    expect(after).toContain("from a")
    expect(after.filter((s) => s === "from a").length).toBeGreaterThanOrEqual(2)
  })

  it("with every key cooled, the one whose cooldown ends first is tried, and its failure is the answer", async () => {
    limited.add(KEY_A)
    limited.add(KEY_B)
    const r = await chat(gw, CLIENT, "pool/model")
    expect(r.status).toBe(429)
    const again = await chat(gw, CLIENT, "pool/model")
    expect(again.status).toBe(429)
    limited.clear()
  })
})
