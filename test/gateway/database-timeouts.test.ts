/**
 * Every PostgreSQL statement bounded, seen from the wire (issue 24): a gateway process with
 * `database.statementTimeoutMs: 500`, its database behind a TCP proxy. A statement held past the
 * bound by another session's lock is stopped by the server and the request answers 503
 * `database_unavailable` in its route's envelope; a network that silently stops delivering holds
 * no request and no shutdown past the client's bound (the statement bound plus a grace, 1 s here):
 * requests that need the database answer 503, the rest are served, and SIGTERM ends the process
 * promptly. Neither the URL nor its password appears in anything the process writes. Times are
 * generous backstops only (the mechanisms are tested in test/sql/postgres-timeouts.test.ts).
 */
import type { ChildProcess } from "node:child_process"
import Pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { call, jsonOf, within } from "../files/uploadWire.js"
import { childGateways, exited, type Child } from "../support/ChildGateway.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"
import { startTcpProxy, type TcpProxy } from "../support/TcpProxy.js"

const ADMIN = "admin-key-database-timeouts-0123"
const KEY = "sk-config-key-database-timeouts-0123"
/** the client's bound for a statement timeout of 500 ms: clientTimeoutMs(500) */
const BOUND_MS = 1_000

const gateways = childGateways()

describe.skipIf(!hasPostgres)("PostgreSQL statements bounded, on the wire", () => {
  let db: TestDatabase
  let proxy: TcpProxy
  let gw: Child
  let via: string
  const admin = { authorization: `Bearer ${ADMIN}` }
  const chat = () =>
    call(gw.port, "POST", "/v1/chat/completions", { authorization: `Bearer ${KEY}`, "content-type": "application/json" }, JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: "hi" }] }))
  /** The answer to `GET target` as the admin, and how long it took. */
  const get = (target: string) => call(gw.port, "GET", target, admin)
  const expectUnavailable = (answer: Awaited<ReturnType<typeof get>>, backstopMs: number) => {
    expect(answer.status, answer.text).toBe(503)
    expect(answer.headers["content-type"]).toContain("application/problem+json")
    expect(jsonOf(answer).code).toBe("database_unavailable")
    expect(answer.ms).toBeLessThan(backstopMs)
  }

  beforeAll(async () => {
    db = await freshDatabase()
    const url = new URL(db.url)
    proxy = await startTcpProxy({ host: url.hostname, port: Number(url.port) })
    url.port = String(proxy.port)
    via = url.toString()
    const workspace = gateways.workspace("gw-db-timeouts-", [
      `adminKey: ${ADMIN}`,
      `database: { url: ${JSON.stringify(via)}, poolSize: 2, statementTimeoutMs: 500 }`,
      "providers: { mock: { type: mock } }",
      "keys:",
      `  - { key: ${KEY}, app: team }`
    ])
    gw = await gateways.start(workspace.cwd, workspace.configFile)
  }, 60_000)
  afterAll(async () => {
    await gateways.cleanup()
    await proxy?.close()
    await db?.drop()
  })

  it("a statement held past statementTimeoutMs by a lock answers 503 in the route's envelope, and the next one is served", async () => {
    expect((await get("/gateway/admin/keys")).status).toBe(200)
    expect((await get("/gateway/usage")).status).toBe(200)
    const holder = new Pg.Client({ connectionString: db.url })
    await holder.connect()
    try {
      await holder.query("BEGIN")
      await holder.query("LOCK TABLE runtime_keys, usage IN ACCESS EXCLUSIVE MODE")
      expectUnavailable(await get("/gateway/admin/keys"), 10_000)
      expectUnavailable(await get("/gateway/usage"), 10_000)
      await holder.query("ROLLBACK")
    } finally {
      await holder.end()
    }
    expect((await get("/gateway/admin/keys")).status).toBe(200)
    expect((await get("/gateway/usage")).status).toBe(200)
  }, 60_000)

  it("a silent network holds no request past the bound, model calls go on, and SIGTERM ends the process promptly", async () => {
    expect((await chat()).status).toBe(200)
    proxy.stall()
    // each needs the database: a pooled connection lost to silence, or a new one never answered
    expectUnavailable(await get("/gateway/admin/keys"), BOUND_MS + 10_000)
    expectUnavailable(await get("/gateway/usage"), BOUND_MS + 10_000)
    // a model call needs no shared state (its usage row waits in memory)
    expect((await chat()).status).toBe(200)

    const child: ChildProcess = gw.child
    const started = Date.now()
    child.kill("SIGTERM")
    await within(20_000, "the gateway to exit after SIGTERM", exited(child)).catch((e: Error) => {
      throw new Error(`${e.message}; it wrote:\n${gw.output()}`)
    })
    expect(Date.now() - started).toBeLessThan(20_000)
    // the usage row it could not write is reported lost, never the database's address or password
    const output = gw.output()
    expect(output).toContain("usage.lost_at_shutdown")
    for (const secret of [db.url, via, new URL(db.url).password]) expect(output).not.toContain(secret)
  }, 60_000)
})
