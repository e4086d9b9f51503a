import { spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { until, within } from "../files/uploadWire.js"

/**
 * `npm start` compiles only when the sources changed (scripts/build.mjs --if-changed, its prestart):
 * run in a copy of the package (package.json, scripts/, tsconfig.json, src/ and the dist/ that
 * global-setup.ts built from it, with the repository's node_modules linked), so that it never
 * rewrites the dist/ other test files run. The stamp is a hash of the sources by content and
 * relative path, so the copy's dist/ is current for the copy's sources.
 */

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")
const dirs = new Set<string>()
const groups = new Set<ChildProcess>()

/** `npm start` and its children (sh, node) form one process group: kill all of it. */
const killGroup = async (child: ChildProcess) => {
  if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
    const closed = new Promise<void>((resolve) => child.once("close", () => resolve()))
    try {
      process.kill(-child.pid, "SIGKILL")
    } catch {
      // already gone
    }
    await within(5_000, "npm start to close", closed).catch(() => undefined)
  }
  groups.delete(child)
}

afterAll(async () => {
  await Promise.all([...groups].map(killGroup))
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
})

const copyOfPackage = (): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-start-"))
  dirs.add(dir)
  for (const entry of ["package.json", "tsconfig.json", "scripts", "src", "dist"]) fs.cpSync(path.join(repo, entry), path.join(dir, entry), { recursive: true })
  fs.symlinkSync(path.join(repo, "node_modules"), path.join(dir, "node_modules"), "dir")
  fs.writeFileSync(path.join(dir, "gateway.yaml"), `listen: { host: 127.0.0.1 }\ndataDir: ${JSON.stringify(path.join(dir, "data"))}\naccessLog: false\n`)
  return dir
}

/** `npm start -- --config gateway.yaml --port 0` in `dir`, until it listens and answers /healthz; then stopped. */
const startOnce = async (dir: string): Promise<string> => {
  const env: Record<string, string> = {}
  for (const name of ["PATH", "HOME", "TMPDIR", "LANG"]) if (process.env[name] !== undefined) env[name] = process.env[name]!
  const child = spawn("npm", ["start", "--", "--config", "gateway.yaml", "--port", "0"], { cwd: dir, env, detached: true, stdio: ["ignore", "pipe", "pipe"] })
  groups.add(child)
  let out = ""
  child.stdout?.setEncoding("utf8").on("data", (s: string) => (out += s))
  child.stderr?.setEncoding("utf8").on("data", (s: string) => (out += s))
  try {
    let port = 0
    // a backstop for a whole-tree compile on a busy machine, not a speed bound
    await until(
      "npm start's listening line",
      () => {
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`npm start exited before listening:\n${out}`)
        const match = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)
        if (match !== null) port = Number(match[1])
        return match !== null
      },
      150_000
    )
    const health = await fetch(`http://127.0.0.1:${port}/healthz`)
    expect(health.status).toBe(200)
    return out
  } finally {
    await killGroup(child)
  }
}

/** Every file of dist/ with its modification time and size. */
const distState = (dir: string): Record<string, string> => {
  const dist = path.join(dir, "dist")
  const state: Record<string, string> = {}
  for (const file of fs.readdirSync(dist, { recursive: true, encoding: "utf8" })) {
    const stat = fs.statSync(path.join(dist, file))
    if (stat.isFile()) state[file] = `${stat.mtimeMs} ${stat.size}`
  }
  return state
}

describe("npm start", () => {
  it("does not compile on a restart with the same sources, and compiles after a source changes", { timeout: 300_000 }, async () => {
    const dir = copyOfPackage()
    // (compiles only if the repository's sources changed since global-setup.ts built dist/)
    await startOnce(dir)
    const built = distState(dir)
    expect(Object.keys(built)).toContain("main.js")
    expect(Object.keys(built)).toContain(".build-stamp")

    // a restart with unchanged sources serves the dist/ it has: no file of it is rewritten
    await startOnce(dir)
    expect(distState(dir)).toEqual(built)

    // so does a copy that only changes modification times (a checkout): the stamp is by content
    const mainTs = path.join(dir, "src/main.ts")
    fs.utimesSync(mainTs, new Date(), new Date(Date.now() + 60_000))
    await startOnce(dir)
    expect(distState(dir)).toEqual(built)

    // a changed source is compiled before the server starts
    const stamp = fs.readFileSync(path.join(dir, "dist/.build-stamp"), "utf8")
    const probe = `startRebuildProbe${Date.now()}`
    fs.appendFileSync(mainTs, `\nexport const ${probe} = "${probe}"\n`)
    await startOnce(dir)
    expect(fs.readFileSync(path.join(dir, "dist/main.js"), "utf8")).toContain(probe)
    expect(fs.readFileSync(path.join(dir, "dist/.build-stamp"), "utf8")).not.toBe(stamp)
  })
})
