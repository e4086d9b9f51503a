import { buildGateway } from "./ChildGateway.js"
import { ensureTestClients } from "./TestClients.js"

/**
 * Once before any test file: `npm run build`, for the tests that run the built gateway as a child
 * process (files/crash, reliability/process-faults). Built here rather than by each of those files,
 * which run in parallel forks: one file's build rewriting `dist/` while the other's child loads it
 * could start a gateway from a half-written module.
 *
 * Also installs the coding-agent CLIs of the end-to-end tests (`npm ci` in test/clients) when they
 * are missing, since the gateway's own install leaves them out.
 */
export default async function setup(): Promise<void> {
  await buildGateway()
  await ensureTestClients()
}
