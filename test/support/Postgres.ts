import { Redacted } from "effect"
import { randomBytes } from "node:crypto"
import Pg from "pg"
import { inject } from "vitest"

/**
 * PostgreSQL for tests: each caller gets a database of its own on the test server (created
 * empty, dropped by `drop`), so that test files running in parallel never see each other's rows.
 */

/** The test server's admin URL, or undefined when the PostgreSQL tests are skipped (never under CI). */
export const pgAdminUrl = (): string | undefined => {
  const url = inject("pgUrl")
  return url === "" ? undefined : url
}

export const hasPostgres = pgAdminUrl() !== undefined

export interface TestDatabase {
  readonly url: string
  readonly redacted: Redacted.Redacted<string>
  readonly drop: () => Promise<void>
}

const admin = async <A>(run: (client: Pg.Client) => Promise<A>): Promise<A> => {
  const url = pgAdminUrl()
  if (url === undefined) throw new Error("no PostgreSQL server for the tests")
  const client = new Pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await run(client)
  } finally {
    await client.end()
  }
}

export const freshDatabase = async (): Promise<TestDatabase> => {
  const name = `gw_test_${randomBytes(6).toString("hex")}`
  await admin((client) => client.query(`CREATE DATABASE ${name}`))
  const url = new URL(pgAdminUrl()!)
  url.pathname = `/${name}`
  return {
    url: url.toString(),
    redacted: Redacted.make(url.toString()),
    drop: () => admin((client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined)
  }
}
