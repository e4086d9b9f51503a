/**
 * Host tools on two replicas sharing one PostgreSQL database (issue 25, "Replicas"): each replica
 * connects to the tool servers itself (here each starts its own server-everything over stdio), and
 * with the same `toolServers` config both offer an app the same tools: what each replica sends the
 * upstream for the same request is the same, tool names, schemas and order included. The host tool
 * calls of both replicas add up in `/gateway/usage`, whichever replica reports.
 */
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatJson, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { freshDatabase, hasPostgres, type TestDatabase } from "../support/Postgres.js"
import { ADMIN, chat, get, parse, type Json } from "../gateway/helpers.js"

const everything = path.resolve("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
const KEY = "sk-replicas-team-a-0123456789"
const APP = "team-a"
const MODEL = "up/m"

const report = async (gw: TestGateway) => {
  const r = await get(gw, `/gateway/usage?app=${APP}`, ADMIN)
  expect(r.status, r.text).toBe(200)
  return parse(r)
}

describe.skipIf(!hasPostgres)("host tools on two replicas (PostgreSQL)", () => {
  let db: TestDatabase
  let upstream: FakeUpstream
  let a: TestGateway
  let b: TestGateway

  beforeAll(async () => {
    db = await freshDatabase()
    upstream = await startFakeUpstream()
    const document = {
      adminKey: ADMIN,
      keys: [{ key: KEY, app: APP }],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-secret" } },
      // two servers (a second server-everything under another name): their tools are listed concurrently
      toolServers: { everything: { command: [process.execPath, everything, "stdio"] }, second: { command: [process.execPath, everything, "stdio"] } },
      apps: { [APP]: { hostTools: ["second/get-sum", "second/echo", "everything/*"] } },
      database: { url: db.url, poolSize: 2 }
    }
    a = await startGateway({ ...document, replicaId: "replica-a" })
    b = await startGateway({ ...document, replicaId: "replica-b" })
  }, 60_000)
  afterAll(async () => {
    await a?.close()
    await b?.close()
    await upstream?.close()
    await db?.drop()
  })

  it("offer the same tools: the upstream receives the same request from either replica, tools in the same order", async () => {
    upstream.reset()
    upstream.script(chatJson({ content: "from a" }), chatJson({ content: "from b" }))
    const fromA = await chat(a, KEY, MODEL)
    const fromB = await chat(b, KEY, MODEL)
    expect(fromA.status, fromA.text).toBe(200)
    expect(fromB.status, fromB.text).toBe(200)
    expect(upstream.requests).toHaveLength(2)
    const [sentByA, sentByB] = upstream.requests.map((r) => r.body as Json)
    const tools = sentByA.tools as Array<{ type: string; function: { name: string; parameters: unknown } }>
    // server-everything's whole tool set, then the two granted of the second server (servers in
    // their config order), each under its model-facing name, with its schema
    const names = tools.map((t) => t.function.name)
    expect(names.length).toBeGreaterThan(5)
    expect(names.slice(-2).sort()).toEqual(["second__echo", "second__get-sum"])
    for (const name of names.slice(0, -2)) expect(name).toMatch(/^everything__[A-Za-z0-9_-]+$/)
    expect(names).toContain("everything__echo")
    for (const tool of tools) {
      expect(tool.type).toBe("function")
      expect(tool.function.parameters).toMatchObject({ type: "object" })
    }
    // names, descriptions, schemas and order: byte for byte, and the rest of the request too
    expect(JSON.stringify(sentByB.tools)).toBe(JSON.stringify(sentByA.tools))
    expect(sentByB).toEqual(sentByA)
  })

  it("count their host calls together in /gateway/usage, whichever replica reports", async () => {
    upstream.reset()
    upstream.script(
      chatJson({ toolCalls: [{ id: "a1", name: "everything__echo", arguments: JSON.stringify({ message: "from a" }) }] }),
      chatJson({ content: "a done" }),
      chatJson({
        toolCalls: [
          { id: "b1", name: "everything__echo", arguments: JSON.stringify({ message: "from b" }) },
          { id: "b2", name: "everything__get-sum", arguments: JSON.stringify({ a: 2, b: 3 }) }
        ]
      }),
      chatJson({ content: "b done" })
    )
    const viaA = await chat(a, KEY, MODEL)
    expect(viaA.status, viaA.text).toBe(200)
    expect(viaA.headers["x-gateway-host-tool-calls"]).toBe("1")
    const viaB = await chat(b, KEY, MODEL)
    expect(viaB.status, viaB.text).toBe(200)
    expect(viaB.headers["x-gateway-host-tool-calls"]).toBe("2")
    // each replica's server answered: its results reached the upstream
    const toolTurns = (i: number) => ((upstream.requests[i].body as Json).messages as Array<Json>).filter((m) => m.role === "tool").map((m) => [m.tool_call_id, m.content])
    expect(toolTurns(1)).toEqual([["a1", "Echo: from a"]])
    expect(toolTurns(3)).toEqual([
      ["b1", "Echo: from b"],
      ["b2", "The sum of 2 and 3 is 5."]
    ])

    // a report writes its own replica's pending figures first: b's, then a's, then both read them all
    await report(b)
    const fromA = await report(a)
    const fromB = await report(b)
    const calls = (r: Json) => (r.hostTools as Array<Json>).map((h) => [h.app, h.server, h.tool, h.outcome, h.calls])
    expect(calls(fromA)).toEqual([
      [APP, "everything", "echo", "ok", 2],
      [APP, "everything", "get-sum", "ok", 1]
    ])
    expect(fromB.hostTools).toEqual(fromA.hostTools)
    // every model call of both replicas: 2 in the first test, 4 here
    expect(fromA.totals).toMatchObject({ requests: 6, errors: 0 })
    expect(fromB.totals).toEqual(fromA.totals)
  })
})
