import { afterAll, describe, expect, it } from "vitest"
import { driverModule } from "../../src/sql/SqliteClient.js"
import { call, sleep } from "../files/uploadWire.js"
import { childGateways, exited } from "../support/ChildGateway.js"

/**
 * The built gateway on the Node that runs the suite (CI runs it on Node 20 and on Node 24). On
 * Node 24.19+ better-sqlite3 12 aborts the process whenever a garbage collection finished by a
 * V8 task (no context entered) collects one of its statements; every transaction leaves two such
 * statements behind, and an idle moment after some work is when V8 finishes its marking in a task.
 */

const gateways = childGateways()
afterAll(gateways.cleanup)

const APP_KEY = "gw-node-versions-app-key"

describe("Node versions", () => {
  it("the driver: better-sqlite3 13 (Node-API) where Node-API 10 is there, 12 on Node 20", () => {
    expect(driverModule(9)).toBe("better-sqlite3")
    expect(driverModule(10)).toBe("better-sqlite3-napi")
  })

  it(`node ${process.version}: dist/main.js serves stored responses, stays up through idle garbage collections, and exits 0 on SIGTERM`, async () => {
    const { cwd, configFile } = gateways.workspace("gw-node-versions-", ["providers:", "  mock: { type: mock }", "keys:", `  - { key: ${APP_KEY}, app: node-versions }`])
    const { child, port, output } = await gateways.start(cwd, configFile)
    const headers = { authorization: `Bearer ${APP_KEY}`, "content-type": "application/json" }
    const ids: Array<string> = []
    for (let round = 0; round < 3; round++) {
      // each stored response is written in a transaction; each round leaves statements to collect
      for (let i = 0; i < 20; i++) {
        const body = JSON.stringify({ model: "mock/echo", input: `round ${round} request ${i} ${"x".repeat(20_000)}`, store: true })
        const answer = await call(port, "POST", "/v1/responses", headers, body)
        expect(answer.status, answer.text).toBe(200)
        ids.push(JSON.parse(answer.text).id)
      }
      // idle: V8 finishes incremental marking from a task, outside any JavaScript context
      await sleep(1_000)
      expect(child.exitCode, output()).toBeNull()
      expect(child.signalCode, output()).toBeNull()
    }
    for (const id of [ids[0], ids[ids.length - 1]]) {
      const answer = await call(port, "GET", `/v1/responses/${id}`, headers)
      expect(answer.status, answer.text).toBe(200)
    }
    child.kill("SIGTERM")
    await exited(child)
    expect({ code: child.exitCode, signal: child.signalCode }, output()).toEqual({ code: 0, signal: null })
    expect(output()).not.toContain("Assertion failed")
  }, 60_000)
})
