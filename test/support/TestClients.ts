import { execFile } from "node:child_process"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

/**
 * The coding-agent CLIs the end-to-end tests run (Claude Code, Codex, Gemini CLI) live in their own
 * package, `test/clients` (its own package.json and lockfile), so that the gateway's install does
 * not carry their 770 MB. The test set-up installs it when missing (`ensureTestClients`, from
 * global-setup.ts); the harnesses resolve the CLIs from it (`testClientEntry`).
 */

export const testClientsDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../clients")

const manifest = path.join(testClientsDir, "package.json")

/** The pinned versions of test/clients/package.json: package name -> version. */
const pinned = (): Record<string, string> =>
  (JSON.parse(fs.readFileSync(manifest, "utf8")) as { dependencies: Record<string, string> }).dependencies

/** A file of an installed test client, as `require.resolve` from test/clients finds it. */
const resolveTestClient = (specifier: string): string => {
  try {
    return createRequire(manifest).resolve(specifier)
  } catch (e) {
    throw new Error(`${specifier} is not installed in test/clients: run \`npm ci\` there (npm test does it when missing)`, { cause: e })
  }
}

/** The directory of an installed test-client package. */
const packageDir = (name: string): string => path.dirname(resolveTestClient(`${name}/package.json`))

/**
 * What each harness runs, inside its package: Claude Code's native binary (placed by the package's
 * postinstall, which test/clients' `allowScripts` lets run), the npm entry of Codex, the bundle of
 * the Gemini CLI (both run with this process's node).
 */
const entries = {
  "@anthropic-ai/claude-code": "bin/claude.exe",
  "@openai/codex": "bin/codex.js",
  "@google/gemini-cli": "bundle/gemini.js"
} as const

export type TestClient = keyof typeof entries

const isTestClient = (name: string): name is TestClient => Object.hasOwn(entries, name)

/** The file a harness runs for `name`, from test/clients. */
export const testClientEntry = (name: TestClient): string => path.join(packageDir(name), entries[name])

/** Which pinned CLIs are not installed at their pinned version with their entry file (empty when all are). */
export const missingTestClients = (): string[] =>
  Object.entries(pinned())
    .filter(([name, version]) => {
      try {
        const installed = JSON.parse(fs.readFileSync(path.join(packageDir(name), "package.json"), "utf8")) as { version?: unknown }
        return installed.version !== version || (isTestClient(name) && !fs.existsSync(testClientEntry(name)))
      } catch {
        return true
      }
    })
    .map(([name]) => name)

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * `npm ci` in test/clients when a pinned CLI is missing or at another version. Test runs started
 * at the same time in one work tree take turns through a lock directory, so that one installs and
 * the others find the result.
 */
export const ensureTestClients = async (): Promise<void> => {
  if (missingTestClients().length === 0) return
  const lock = path.join(testClientsDir, ".install-lock")
  const deadline = Date.now() + 15 * 60_000
  for (;;) {
    try {
      fs.mkdirSync(lock)
      break
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e
      const held = fs.statSync(lock, { throwIfNoEntry: false })
      if (held === undefined) continue
      // a lock older than any install is left over from a killed run
      if (Date.now() - held.mtimeMs > 15 * 60_000) fs.rmSync(lock, { recursive: true, force: true })
      else if (Date.now() > deadline) throw new Error(`test/clients: another install holds ${lock}`)
      else await sleep(1_000)
    }
  }
  try {
    const missing = missingTestClients()
    if (missing.length === 0) return
    process.stderr.write(`test/clients: installing ${missing.join(", ")} (npm ci)\n`)
    await promisify(execFile)("npm", ["ci", "--no-audit", "--no-fund"], { cwd: testClientsDir, timeout: 15 * 60_000, maxBuffer: 16 * 1024 * 1024 }).catch(
      (e: { stdout?: string; stderr?: string }) => {
        throw new Error(`npm ci in test/clients failed:\n${e.stdout ?? ""}${e.stderr ?? ""}`)
      }
    )
    const still = missingTestClients()
    if (still.length > 0) throw new Error(`npm ci in test/clients left out ${still.join(", ")}`)
  } finally {
    fs.rmSync(lock, { recursive: true, force: true })
  }
}
