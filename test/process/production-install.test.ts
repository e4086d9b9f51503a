import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { afterAll, describe, expect, it } from "vitest"
import { childGateways } from "../support/ChildGateway.js"

/**
 * A production install: package.json, package-lock.json and dist/ (built by global-setup.ts) in a
 * directory of their own, with the production dependencies only, then `node dist/main.js`.
 *
 * Within `npm test` the production packages (the lockfile's entries not marked `dev`) are linked
 * from the repository's node_modules and node runs with --preserve-symlinks, so that every import,
 * the gateway's and its dependencies', resolves inside that directory: a runtime import of a
 * devDependency (tsx, typescript, a test SDK) fails there as it would after `npm ci --omit=dev`.
 * `.ci/run` also runs this file with PRODUCTION_INSTALL=npm-ci: a real `npm ci --omit=dev
 * --offline` from the npm cache (it compiles the SQLite driver, which is too slow for `npm test`).
 */

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const realInstall = process.env.PRODUCTION_INSTALL === "npm-ci"
const gateways = childGateways()
const dirs = new Set<string>()

afterAll(async () => {
  await gateways.cleanup()
  for (const dir of dirs) await fs.promises.rm(dir, { recursive: true, force: true })
}, 120_000)

interface Lockfile {
  readonly packages: Record<string, { readonly dev?: boolean; readonly link?: boolean }>
}

const readJson = (file: string): unknown => JSON.parse(fs.readFileSync(file, "utf8"))

/** Top-level packages `npm ci --omit=dev` installs (nested ones come with their parent's folder); absent optional builds for other platforms left out. */
const productionPackages = (): string[] => {
  const lock = readJson(path.join(repo, "package-lock.json")) as Lockfile
  return Object.entries(lock.packages)
    .filter(([where, entry]) => where.startsWith("node_modules/") && !where.slice("node_modules/".length).includes("/node_modules/") && entry.dev !== true)
    .map(([where]) => where.slice("node_modules/".length))
    .filter((name) => fs.existsSync(path.join(repo, "node_modules", name)))
}

const install = async (dir: string): Promise<void> => {
  if (realInstall) {
    await promisify(execFile)("npm", ["ci", "--omit=dev", "--offline", "--no-audit", "--no-fund"], { cwd: dir, timeout: 15 * 60_000, maxBuffer: 16 * 1024 * 1024 })
    return
  }
  for (const name of productionPackages()) {
    const target = path.join(dir, "node_modules", name)
    fs.mkdirSync(path.dirname(target), { recursive: true })
    fs.symlinkSync(path.join(repo, "node_modules", name), target, "dir")
  }
}

describe(`a production install (${realInstall ? "npm ci --omit=dev" : "production packages linked"})`, () => {
  it("serves a request from dist/ with no devDependency installed", { timeout: realInstall ? 20 * 60_000 : 60_000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-production-"))
    dirs.add(dir)
    for (const entry of ["package.json", "package-lock.json", "dist"]) fs.cpSync(path.join(repo, entry), path.join(dir, entry), { recursive: true })
    await install(dir)

    const { devDependencies } = readJson(path.join(dir, "package.json")) as { devDependencies: Record<string, string> }
    expect(Object.keys(devDependencies)).toEqual(expect.arrayContaining(["typescript", "tsx", "vitest"]))
    // a devDependency that a production package also needs (eventsource-parser, for the MCP client) is
    // rightly installed: the lockfile marks only the others dev-only
    const lock = readJson(path.join(repo, "package-lock.json")) as Lockfile
    const devOnly = Object.keys(devDependencies).filter((name) => lock.packages[`node_modules/${name}`]?.dev === true)
    expect(devOnly).toEqual(expect.arrayContaining(["typescript", "tsx", "vitest"]))
    for (const name of devOnly) expect(fs.existsSync(path.join(dir, "node_modules", name)), `${name} is installed`).toBe(false)
    expect(fs.existsSync(path.join(dir, "node_modules/effect")), "effect is installed").toBe(true)

    const { cwd, configFile } = gateways.workspace("gw-production-run-", ["providers:", "  mock: { type: mock }"])
    const gateway = await gateways.start(cwd, configFile, {
      main: path.join(dir, "dist/main.js"),
      nodeArgs: realInstall ? [] : ["--preserve-symlinks"]
    })
    const response = await fetch(`http://127.0.0.1:${gateway.port}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "mock/echo", messages: [{ role: "user", content: "Hello production" }] })
    })
    expect(response.status, gateway.output()).toBe(200)
    const body = (await response.json()) as { choices: Array<{ message: { content: string } }> }
    expect(body.choices[0].message.content).toBe("Hello production")
    // ready runs a query: the SQLite driver (a native addon) of this install works
    const ready = await fetch(`http://127.0.0.1:${gateway.port}/readyz`)
    expect(await ready.json()).toEqual({ ready: true })
  })
})
