/**
 * Routing (issue 18, first part): several API keys of one provider are targets of their own,
 * taken in turn; a key answered 429 with `Retry-After: 2` rests for those 2 s while the other key
 * carries the traffic, then one call probes it and it takes its share again. Keys never appear
 * in answers.
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { driverModule } from "../../src/sql/SqliteClient.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { chatJson, openAiError, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { ADMIN, chat, get, parse, sleep } from "../gateway/helpers.js"

interface Sqlite {
  prepare(sql: string): { all(): Array<unknown> }
  close(): void
}
const Database = createRequire(import.meta.url)(driverModule(Number(process.versions.napi))) as new (file: string, options: { readonly fileMustExist: boolean; readonly timeout: number }) => Sqlite

const KEY_A = "sk-upstream-key-a-0123456789"
const KEY_B = "sk-upstream-key-b-0123456789"
const CLIENT = "sk-routing-client-0123456789"

describe("apiKeys: each key a target, cooled down on its own", () => {
  let up: FakeUpstream
  let gw: TestGateway
  // the test's own data dir: it outlives the gateway, for the usage rows written when it stops
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-keys-health-"))
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
    }, { dataDir })
  })
  afterAll(async () => {
    await gw?.close()
    await up?.close()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  const answered = async () => {
    const r = await chat(gw, CLIENT, "pool/model")
    expect(r.status, r.text).toBe(200)
    expect(r.text).not.toContain(KEY_A)
    const content = (parse(r).choices as Array<{ message: { content: string } }>)[0].message.content
    // the answer names the key that answered, by index
    expect(r.headers["x-gateway-target"]).toBe(content === "from a" ? "pool/model#key0" : "pool/model#key1")
    return content
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

  it("usage rows keep which key answered, by index (written when the gateway stops)", async () => {
    await gw.close()
    const db = new Database(path.join(dataDir, "gateway.db"), { fileMustExist: true, timeout: 2000 })
    try {
      const rows = db.prepare("SELECT provider, model, key_index, status FROM usage WHERE status = 'ok'").all() as Array<Record<string, unknown>>
      expect(rows.length).toBeGreaterThan(10)
      expect(new Set(rows.map((r) => `${String(r.provider)} ${String(r.model)} ${String(r.key_index)}`))).toEqual(new Set(["pool pool/model 0", "pool pool/model 1"]))
    } finally {
      db.close()
    }
  })
})
