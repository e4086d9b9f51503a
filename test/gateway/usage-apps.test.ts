import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { ADMIN, bearer, call, chatBody, expectProblem, get, KEYS, parse, postJson, type Json } from "./helpers.js"

/**
 * Which apps `/gateway/usage?app=` accepts (spec 4.5): an app whose runtime keys were all revoked,
 * or whose configured key was removed, keeps its past usage reportable, also after a restart; a
 * name that never had a key nor any usage is still `invalid_app`.
 */

const MODEL = "mock/echo"

const documentWith = (keys: ReadonlyArray<Json>): Json => ({ providers: { mock: { type: "mock" } }, adminKey: ADMIN, keys })
const withAlpha = documentWith([{ key: KEYS.alpha, app: "alpha" }])
const withoutAlpha = documentWith([{ key: KEYS.beta, app: "beta" }])

interface Totals {
  readonly requests: number
  readonly inputTokens: number
  readonly outputTokens: number
}

const dirs: Array<string> = []
const dataDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-usage-apps-"))
  dirs.push(dir)
  return dir
}
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
})

/** A chat call through the mock provider that reports `input`/`output` tokens. */
const modelCall = async (gw: TestGateway, key: string, input: number, output: number) => {
  const r = await postJson(gw, "/v1/chat/completions", chatBody(MODEL, { messages: [{ role: "user", content: `::usage ${input} ${output}\nhello` }] }), bearer(key))
  expect(r.status, r.text).toBe(200)
}

const createKey = async (gw: TestGateway, app: string): Promise<{ readonly id: string; readonly key: string }> => {
  const r = await postJson(gw, "/gateway/admin/keys", { app }, bearer(ADMIN))
  expect(r.status, r.text).toBe(201)
  const body = parse(r)
  return { id: body.id as string, key: body.key as string }
}

const revoke = async (gw: TestGateway, id: string) => {
  const r = await call(gw, "DELETE", `/gateway/admin/keys/${id}`, { headers: bearer(ADMIN) })
  expect(r.status, r.text).toBe(200)
}

/** The admin's usage report for one app: its totals. */
const usageOf = async (gw: TestGateway, app: string): Promise<Totals> => {
  const r = await get(gw, `/gateway/usage?app=${app}`, ADMIN)
  expect(r.status, r.text).toBe(200)
  const body = parse(r)
  expect(body.app).toBe(app)
  const totals = body.totals as Totals
  return { requests: totals.requests, inputTokens: totals.inputTokens, outputTokens: totals.outputTokens }
}

describe("usage of apps whose keys are gone", () => {
  it("an app whose runtime keys are all revoked: its calls stay reportable, also after a restart", async () => {
    const dir = dataDir()
    const gw = await startGateway(withAlpha, { dataDir: dir })
    const bots = await createKey(gw, "bots")
    await modelCall(gw, bots.key, 11, 7)
    await revoke(gw, bots.id)
    // the key itself no longer works
    const refused = await postJson(gw, "/v1/chat/completions", chatBody(MODEL), bearer(bots.key))
    expect(refused.status).toBe(401)
    expect(await usageOf(gw, "bots")).toEqual({ requests: 1, inputTokens: 11, outputTokens: 7 })
    // an app whose only key was revoked before any call: an empty report, not invalid_app
    const quiet = await createKey(gw, "quiet")
    await revoke(gw, quiet.id)
    expect(await usageOf(gw, "quiet")).toEqual({ requests: 0, inputTokens: 0, outputTokens: 0 })
    await gw.close()

    const again = await startGateway(withAlpha, { dataDir: dir })
    expect(await usageOf(again, "bots")).toEqual({ requests: 1, inputTokens: 11, outputTokens: 7 })
    expect(await usageOf(again, "quiet")).toEqual({ requests: 0, inputTokens: 0, outputTokens: 0 })
    await again.close()
  })

  it("an app whose configured key was removed from the config: its recorded usage stays reportable", async () => {
    const dir = dataDir()
    const gw = await startGateway(withAlpha, { dataDir: dir })
    await modelCall(gw, KEYS.alpha, 5, 3)
    await modelCall(gw, KEYS.alpha, 5, 3)
    await gw.close()

    const again = await startGateway(withoutAlpha, { dataDir: dir })
    expect(await usageOf(again, "alpha")).toEqual({ requests: 2, inputTokens: 10, outputTokens: 6 })
    await again.close()
  })

  it("a name that never had a key nor any usage is still invalid_app, naming the field", async () => {
    const gw = await startGateway(withAlpha, { dataDir: dataDir() })
    const bots = await createKey(gw, "bots")
    await revoke(gw, bots.id)
    for (const app of ["nobody", "bot", "ALPHA"]) {
      const target = `/gateway/usage?app=${app}`
      expectProblem(await get(gw, target, ADMIN), 400, "invalid_app", { instance: target, param: "app" })
    }
    await gw.close()
  })
})
