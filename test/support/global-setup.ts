import type { TestProject } from "vitest/node"
import { buildGateway } from "./ChildGateway.js"
import { postgresBin, startPostgres } from "./PostgresServer.js"
import { ensureTestClients } from "./TestClients.js"

declare module "vitest" {
  export interface ProvidedContext {
    /** an admin URL of the PostgreSQL server the tests use, or "" when there is none */
    pgUrl: string
  }
}

/**
 * Once before any test file: `npm run build`, for the tests that run the built gateway as a child
 * process (files/crash, reliability/process-faults), and for the dashboard's browser script, which
 * every in-process gateway reads from dist/ (src/protocols/gateway/Dashboard.ts). Built here rather
 * than by each of those files, which run in parallel forks: one file's build rewriting `dist/` while
 * the other's child loads it could start a gateway from a half-written module.
 *
 * Also installs the coding-agent CLIs of the end-to-end tests (`npm ci` in test/clients) when they
 * are missing, since the gateway's own install leaves them out.
 *
 * PostgreSQL: the server at `TEST_DATABASE_URL` (`.ci/run` starts one), else a throwaway server
 * started here when the binaries are installed. Under CI one is required: the PostgreSQL tests
 * never skip there.
 */
export default async function setup(project: TestProject): Promise<() => void> {
  await buildGateway()
  await ensureTestClients()
  const given = process.env.TEST_DATABASE_URL
  if (given !== undefined && given !== "") {
    project.provide("pgUrl", given)
    return () => {}
  }
  if (postgresBin() === undefined) {
    if (process.env.CI) throw new Error("CI: PostgreSQL is required (set TEST_DATABASE_URL or install the postgresql package)")
    process.stderr.write("PostgreSQL is not installed: the PostgreSQL tests are skipped (see README, Tests)\n")
    project.provide("pgUrl", "")
    return () => {}
  }
  const server = await startPostgres()
  project.provide("pgUrl", server.url)
  return () => server.stop()
}
