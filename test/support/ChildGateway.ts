import { execFile, spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { sleep, until, within } from "../files/uploadWire.js"

/**
 * The built gateway as a real child process (`node dist/main.js`, built once by global-setup.ts),
 * for tests that kill it: a working directory with its config, start with port 0, kill hard, and
 * stop every child and remove every directory a test file made.
 */

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

export interface Child {
  readonly child: ChildProcess
  readonly port: number
  readonly output: () => string
}

/** `npm run build` (a second try, should the sources be caught mid-edit); run once by global-setup.ts. */
export const buildGateway = async (): Promise<void> => {
  const build = () => promisify(execFile)("npm", ["run", "build", "--silent"], { cwd: repo, timeout: 80_000 })
  await build().catch(async () => {
    await sleep(3_000)
    await build().catch((e: { stdout?: string; stderr?: string }) => {
      throw new Error(`npm run build failed:\n${e.stdout ?? ""}${e.stderr ?? ""}`)
    })
  })
}

/** Resolves once the process has exited. */
export const exited = (child: ChildProcess) =>
  new Promise<void>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once("close", () => resolve())))

export const killHard = async (child: ChildProcess) => {
  if (child.exitCode !== null || child.signalCode !== null) return
  child.kill("SIGKILL")
  await within(5_000, "killed child to close", exited(child)).catch(() => undefined)
}

/** The children (and their working directories) one test file starts; `cleanup` in its afterAll. */
export const childGateways = () => {
  const children = new Set<ChildProcess>()
  const dirs = new Set<string>()
  /**
   * A fresh working directory with `gateway.yaml` listening on 127.0.0.1, its data in `./data`,
   * the access log off, and `lines` (more config) after that.
   */
  const workspace = (prefix: string, lines: ReadonlyArray<string>) => {
    const cwd = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
    dirs.add(cwd)
    const dataDir = path.join(cwd, "data")
    const configFile = path.join(cwd, "gateway.yaml")
    fs.writeFileSync(configFile, ["listen: { host: 127.0.0.1 }", `dataDir: ${JSON.stringify(dataDir)}`, "accessLog: false", ...lines].join("\n") + "\n")
    return { cwd, dataDir, configFile }
  }
  /**
   * `node dist/main.js --config FILE --port 0` in `cwd`; resolves with the port it listens on.
   * `main` runs another build (a production install's), with `nodeArgs` before it.
   */
  const start = async (cwd: string, configFile: string, options: { readonly main?: string; readonly nodeArgs?: ReadonlyArray<string> } = {}): Promise<Child> => {
    const env: Record<string, string> = {}
    for (const name of ["PATH", "HOME", "TMPDIR", "LANG"]) if (process.env[name] !== undefined) env[name] = process.env[name]!
    const main = options.main ?? path.join(repo, "dist/main.js")
    const child = spawn(process.execPath, [...(options.nodeArgs ?? []), main, "--config", configFile, "--port", "0"], { cwd, env, stdio: ["ignore", "pipe", "pipe"] })
    children.add(child)
    child.once("close", () => children.delete(child))
    let out = ""
    child.stdout?.setEncoding("utf8").on("data", (s: string) => (out += s))
    child.stderr?.setEncoding("utf8").on("data", (s: string) => (out += s))
    let port = 0
    await until(
      "the child's listening line",
      () => {
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`gateway exited before listening:\n${out}`)
        const match = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)
        if (match !== null) port = Number(match[1])
        return match !== null
      },
      20_000
    )
    return { child, port, output: () => out }
  }
  const cleanup = async () => {
    await Promise.all([...children].map(killHard))
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
  }
  return { workspace, start, cleanup }
}
