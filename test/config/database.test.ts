import { Either } from "effect"
import { describe, expect, it } from "vitest"
import { decodeConfig } from "../../src/Config.js"

/** `database.statementTimeoutMs` (issue 24); the rest of `database` is in config.test.ts. */
describe("config: database.statementTimeoutMs", () => {
  const decode = (statementTimeoutMs: unknown) => decodeConfig({ database: { url: "postgres://h/db", statementTimeoutMs } }, {})

  it("30 s by default; any whole number of ms from 1 to a day", () => {
    const absent = decodeConfig({ database: { url: "postgres://h/db" } }, {})
    expect(Either.isRight(absent) && absent.right.database.statementTimeoutMs).toBe(30_000)
    for (const ms of [1, 500, 86_400_000]) {
      const decoded = decode(ms)
      expect(Either.isRight(decoded) && decoded.right.database.statementTimeoutMs).toBe(ms)
    }
  })

  it("anything else is one problem naming the field", () => {
    for (const bad of [0, -5, 1.5, "30s", 86_400_001]) {
      const decoded = decode(bad)
      expect(Either.isLeft(decoded) && decoded.left.problems.map((line) => line.slice(0, line.indexOf(": ")))).toEqual(["database.statementTimeoutMs"])
    }
  })
})
