/**
 * Processes of the benchmark: the bench helpers compiled to plain JS (so no contestant, nor the
 * load generator, carries the tsx loader's thread and memory), servers started as children and
 * killed whatever happens, their RSS, and the client side of the load generator (bench/loader.ts).
 */
import { fork, spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import ts from "typescript"
import type { FromLoader, HoldJob, HoldOpen, HoldResult, LoadJob, LoadResult, ToLoader } from "./loader.js"

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

// --- children: all killed when this process exits, however it exits ----------------------------

const children = new Set<ChildProcess>()
export const track = (child: ChildProcess) => {
  children.add(child)
  child.once("exit", () => children.delete(child))
  return child
}
process.on("exit", () => {
  for (const child of children) {
    try {
      child.kill("SIGKILL")
    } catch {
      // gone already
    }
  }
})
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.once(signal, () => process.exit(130))

/** SIGTERM, then SIGKILL after `ms` */
export const stopChild = async (child: ChildProcess, ms = 3000) => {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  child.kill("SIGTERM")
  const timer = setTimeout(() => child.kill("SIGKILL"), ms)
  await exited
  clearTimeout(timer)
}

/** VmRSS of a process in bytes, or undefined where /proc is not readable */
export const rssOf = (pid: number): number | undefined => {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))
    return m === null ? undefined : Number(m[1]) * 1024
  } catch {
    return undefined
  }
}

/** the median of `samples` RSS readings `everyMs` apart */
export const sampleRss = async (pid: number, samples = 5, everyMs = 50): Promise<number | undefined> => {
  const values: Array<number> = []
  for (let i = 0; i < samples; i++) {
    const v = rssOf(pid)
    if (v !== undefined) values.push(v)
    if (i < samples - 1) await new Promise((r) => setTimeout(r, everyMs))
  }
  if (values.length === 0) return undefined
  values.sort((a, b) => a - b)
  return values[Math.floor(values.length / 2)]
}

// --- the bench helpers as plain JS ----------------------------------------------------------------

export const buildDir = path.join(repoRoot, "bench/.build")
let built = false
/** Transpile the files the children run (no type check here: `npm run typecheck` does that). */
export const compileBench = () => {
  if (built) return buildDir
  fs.mkdirSync(buildDir, { recursive: true })
  for (const name of ["protocols", "upstream", "passthrough", "loader", "heapmeter", "floor", "hostupstream", "mcpfake"]) {
    const source = fs.readFileSync(path.join(repoRoot, "bench", `${name}.ts`), "utf8")
    const out = ts.transpileModule(source, { fileName: `${name}.ts`, compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 } })
    // write then rename: another bench run may be starting these very files right now
    const target = path.join(buildDir, `${name}.js`)
    const temp = `${target}.${process.pid}.tmp`
    fs.writeFileSync(temp, out.outputText)
    fs.renameSync(temp, target)
  }
  built = true
  return buildDir
}

// --- servers --------------------------------------------------------------------------------------

export interface Server {
  readonly name: string
  readonly url: string
  readonly pid: number
  readonly child: ChildProcess
  /** the tail of its stdout and stderr */
  readonly output: () => string
  readonly stop: () => Promise<void>
}

const LISTENING = /listening on (http:\/\/[^\s"'<>]+)/

/** Spawn a server; resolves with its URL once it prints `listening on http://...` */
export const startServer = (
  name: string,
  command: string,
  args: ReadonlyArray<string>,
  options: { readonly cwd?: string; readonly env?: NodeJS.ProcessEnv; readonly timeoutMs?: number; readonly onStop?: () => void } = {}
): Promise<Server> => {
  const child = track(spawn(command, args, { cwd: options.cwd ?? repoRoot, env: options.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] }))
  let tail = ""
  const keep = (d: Buffer) => {
    tail = (tail + d.toString("utf8")).slice(-8192)
  }
  child.stdout?.on("data", keep)
  child.stderr?.on("data", keep)
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`${name} did not start within ${options.timeoutMs ?? 30_000} ms: ${tail.slice(-1000)}`))
    }, options.timeoutMs ?? 30_000)
    const onExit = (code: number | null) => {
      clearTimeout(timer)
      reject(new Error(`${name} exited with ${code}: ${tail.slice(-1000)}`))
    }
    child.once("exit", onExit)
    child.once("error", (e) => {
      clearTimeout(timer)
      reject(new Error(`${name} could not start: ${e.message}`))
    })
    const scan = () => {
      const m = LISTENING.exec(tail)
      if (m === null) return
      clearTimeout(timer)
      child.off("exit", onExit)
      child.stdout?.off("data", scan)
      child.stderr?.off("data", scan)
      resolve({
        name,
        url: m[1].replace(/\/+$/, "").replace("//localhost:", "//127.0.0.1:").replace("//0.0.0.0:", "//127.0.0.1:"),
        pid: child.pid!,
        child,
        output: () => tail,
        stop: async () => {
          await stopChild(child)
          options.onStop?.()
        }
      })
    }
    child.stdout?.on("data", scan)
    child.stderr?.on("data", scan)
  })
}

/** a server from bench/.build (plain node, no tsx) */
export const startBenchServer = (
  name: string,
  file: "upstream" | "passthrough" | "floor" | "hostupstream" | "mcpfake",
  args: ReadonlyArray<string> = [],
  options: { readonly nodeArgs?: ReadonlyArray<string>; readonly env?: Readonly<Record<string, string>> } = {}
) =>
  startServer(name, process.execPath, [...(options.nodeArgs ?? []), path.join(compileBench(), `${file}.js`), ...args], options.env !== undefined ? { env: { ...process.env, ...options.env } } : {})

// --- the load generator ---------------------------------------------------------------------------

export interface Loader {
  readonly pid: number
  readonly load: (job: LoadJob) => Promise<LoadResult>
  /** open `job.count` streams; `whileOpen` runs once they are open (it must release them upstream) */
  readonly hold: (job: HoldJob, whileOpen: (open: HoldOpen) => Promise<void>) => Promise<{ readonly open: HoldOpen; readonly result: HoldResult }>
  readonly close: () => Promise<void>
}

const startLoader = async (): Promise<Loader> => {
  const child = track(fork(path.join(compileBench(), "loader.js"), [], { execArgv: [], stdio: ["ignore", "inherit", "inherit", "ipc"] }))
  const waiting = new Map<number, { resolve: (m: FromLoader) => void; reject: (e: Error) => void }>()
  let nextId = 1
  let ready!: () => void
  const isReady = new Promise<void>((r) => (ready = r))
  child.on("message", (m: FromLoader) => {
    if (m.type === "ready") return ready()
    const w = waiting.get(m.id)
    if (w === undefined) return
    if (m.type === "failed") {
      waiting.delete(m.id)
      w.reject(new Error(`load generator: ${m.message}`))
    } else w.resolve(m)
  })
  child.once("exit", (code) => {
    for (const w of waiting.values()) w.reject(new Error(`the load generator exited with ${code}`))
    waiting.clear()
  })
  await isReady
  const post = (m: ToLoader) => child.send(m)
  return {
    pid: child.pid!,
    load: (job) =>
      new Promise((resolve, reject) => {
        const id = nextId++
        waiting.set(id, {
          resolve: (m) => {
            waiting.delete(id)
            if (m.type === "result") resolve(m.result)
            else reject(new Error(`unexpected ${m.type}`))
          },
          reject
        })
        post({ type: "load", id, job })
      }),
    hold: (job, whileOpen) =>
      new Promise((resolve, reject) => {
        const id = nextId++
        let open: HoldOpen | undefined
        waiting.set(id, {
          resolve: (m) => {
            if (m.type === "hold-open") {
              open = m.open
              whileOpen(m.open).then(
                () => post({ type: "finish-hold", id }),
                (e: unknown) => {
                  post({ type: "finish-hold", id })
                  reject(e instanceof Error ? e : new Error(String(e)))
                }
              )
            } else if (m.type === "hold-done") {
              waiting.delete(id)
              resolve({ open: open ?? { open: 0, failed: job.count, seconds: 0 }, result: m.result })
            }
          },
          reject
        })
        post({ type: "hold", id, job })
      }),
    close: async () => {
      if (child.connected) child.disconnect()
      await stopChild(child, 1000)
    }
  }
}

let shared: Promise<Loader> | undefined
/** the one load generator of this run (started on first use) */
export const loader = () => (shared ??= startLoader())
export const closeLoader = async () => {
  if (shared !== undefined) await (await shared).close()
  shared = undefined
}
