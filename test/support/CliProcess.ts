import { spawn, type ChildProcess } from "node:child_process"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"

/**
 * What the real-CLI harnesses (Codex, Claude Code, Gemini CLI) share: every run's processes carry
 * a marker variable so that nothing a CLI started can outlive the test, their output is JSON
 * lines, and each harness keeps a registry of its runs (`makeRunRegistry`) for disposeAll and
 * the live-pids check.
 */

/** Pids of processes whose environment carries `marker=id` (Linux /proc; empty elsewhere). */
export const markedPids = (marker: string, id: string): number[] => {
  const needle = `${marker}=${id}`
  let entries: string[]
  try {
    entries = fs.readdirSync("/proc")
  } catch {
    return []
  }
  const found: number[] = []
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue
    const pid = Number(entry)
    if (pid === process.pid) continue
    try {
      const environ = fs.readFileSync(`/proc/${entry}/environ`, "latin1")
      if (environ.split("\0").includes(needle)) found.push(pid)
    } catch {
      // gone, or not ours
    }
  }
  return found
}

const killQuietly = (pid: number): void => {
  try {
    process.kill(pid, "SIGKILL")
  } catch {
    // already gone
  }
}

/**
 * SIGKILL the run's process group (detached => pgid = the CLI's pid) and every process carrying
 * the run's marker. `group: false` once the CLI has long exited (its pgid could be reused).
 */
export const killRun = (child: ChildProcess, marker: string, id: string, group = true): void => {
  if (group && child.pid !== undefined) killQuietly(-child.pid)
  for (const pid of markedPids(marker, id)) killQuietly(pid)
}

/** The JSON object lines of a CLI's stdout. */
export const parseJsonLines = <A extends object>(stdout: string): A[] => {
  const events: A[] = []
  for (const line of stdout.split("\n")) {
    const trimmed = line.trim()
    if (!trimmed.startsWith("{")) continue
    try {
      const value: unknown = JSON.parse(trimmed)
      if (value !== null && typeof value === "object" && !Array.isArray(value)) events.push(value as A)
    } catch {
      // not an event line
    }
  }
  return events
}

/** Write files (relative path → content) into a work directory. */
export const seedFiles = (dir: string, files: Readonly<Record<string, string>> | undefined): void => {
  for (const [rel, content] of Object.entries(files ?? {})) {
    const file = path.join(dir, rel)
    fs.mkdirSync(path.dirname(file), { recursive: true })
    fs.writeFileSync(file, content)
  }
}

export interface CliExit {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
  readonly timedOut: boolean
  readonly durationMs: number
  readonly stdout: string
  readonly stderr: string
}

export interface CliProcessHandle {
  readonly pid: number | undefined
  /** kill the run now (its group and every marked process) */
  readonly kill: () => void
  /** kill, wait for the exit, then remove the run's directories; idempotent */
  readonly dispose: () => Promise<void>
  /** the exit; the private directory (`root`) is removed by then, the work dir kept */
  readonly exited: Promise<CliExit>
}

/**
 * Run a CLI detached (its own process group) with a hard timeout. When it exits, nothing it
 * started may outlive it: its group and every process carrying `marker=id` are killed.
 */
export const spawnCli = (options: {
  readonly command: string
  readonly args: ReadonlyArray<string>
  readonly cwd: string
  readonly env: Readonly<Record<string, string>>
  readonly marker: string
  readonly id: string
  readonly timeoutMs: number
  readonly echoStderr?: boolean
  /** name in spawn-error lines */
  readonly tag: string
  /** the run's private directory (HOME and the like), removed on exit */
  readonly root: string
  /** the work directory, removed on dispose */
  readonly workDir: string
}): CliProcessHandle => {
  const { id, marker } = options
  const started = Date.now()
  const child = spawn(options.command, [...options.args], { cwd: options.cwd, env: options.env, stdio: ["ignore", "pipe", "pipe"], detached: true })
  let stdout = ""
  let stderr = ""
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk
    if (options.echoStderr === true) process.stderr.write(chunk)
  })
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    killRun(child, marker, id)
  }, options.timeoutMs)
  const removeRoot = () => fs.rmSync(options.root, { recursive: true, force: true })
  let hasExited = false
  const exited = new Promise<CliExit>((resolve) => {
    let done = false
    const finish = (code: number | null, signal: NodeJS.Signals | null): void => {
      if (done) return
      done = true
      // the CLI has exited: nothing of this run (commands it ran, sandbox helpers) should outlive it
      killRun(child, marker, id)
      hasExited = true
      clearTimeout(timer)
      removeRoot()
      resolve({ code, signal, timedOut, durationMs: Date.now() - started, stdout, stderr })
    }
    child.on("error", (err) => {
      stderr += `\n[${options.tag}] spawn error: ${String(err)}\n`
      finish(null, null)
    })
    // "close" (not "exit"): stdout/stderr are fully read by then
    child.on("close", (code, signal) => finish(code, signal))
  })
  let disposed: Promise<void> | undefined
  return {
    pid: child.pid,
    kill: () => killRun(child, marker, id, !hasExited),
    dispose: () => {
      disposed ??= (async () => {
        killRun(child, marker, id, !hasExited)
        await exited
        killRun(child, marker, id, false) // stragglers started between the first kill and the exit
        fs.rmSync(options.workDir, { recursive: true, force: true })
      })()
      return disposed
    },
    exited
  }
}

// ---------------------------------------------------------------------------------------------
// A harness's runs
// ---------------------------------------------------------------------------------------------

/** What every harness's result holds besides what it parses from the output. */
export interface CliRunResult {
  /** Exit code; null when killed by a signal. */
  exitCode: number | null
  signal: NodeJS.Signals | null
  /** True when the hard timeout killed it. */
  timedOut: boolean
  durationMs: number
  stdout: string
  stderr: string
  /** The cwd the CLI ran in; kept until `dispose()`. */
  workDir: string
}

/** A started run, as every harness returns it (plus its own directories). */
export interface CliRunProcess<Run> {
  readonly pid: number | undefined
  readonly workDir: string
  /** Resolves when the process has exited (never rejects; a spawn error shows up as exitCode null + stderr). */
  readonly result: Promise<Run>
  /** SIGKILL the process group (and marked stragglers) now. */
  kill(): void
  /** Kill, wait for exit, remove all temp dirs. Idempotent. */
  dispose(): Promise<void>
}

/** The minimal environment a CLI starts from (this node first on PATH); nothing else of this process's. */
export const minimalCliEnv = (dirs: { readonly home: string; readonly tmp: string; readonly shell?: string }): Record<string, string> => ({
  PATH: [path.dirname(process.execPath), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"].join(":"),
  HOME: dirs.home,
  TMPDIR: dirs.tmp,
  ...(dirs.shell !== undefined ? { SHELL: dirs.shell } : {}),
  LANG: "C.UTF-8",
  LC_ALL: "C.UTF-8",
  TERM: "dumb",
  NO_COLOR: "1",
  NO_PROXY: "*",
  no_proxy: "*"
})

/**
 * A run about to start: its id (the marker's value) and directories, a private `root` (removed as
 * soon as the CLI exits) holding `home` and `tmp`, and a fresh work dir (removed on dispose).
 */
export interface RunSetup {
  readonly id: string
  readonly root: string
  readonly home: string
  readonly tmp: string
  readonly workDir: string
}

/** One harness's runs, each marked with `marker=<run id>`. */
export const makeRunRegistry = (marker: string) => {
  const live = new Set<{ dispose(): Promise<void> }>()
  const runIds = new Set<string>()

  /**
   * A fresh run id (its marked processes count in `livePids` until the run is disposed) and
   * directories named `<name>-test-*` and `<name>-work-*`, the work dir seeded with `files`.
   */
  const begin = (name: string, files: Readonly<Record<string, string>> | undefined): RunSetup => {
    const id = randomUUID()
    runIds.add(id)
    const root = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-test-`))
    const home = path.join(root, "home")
    const tmp = path.join(root, "tmp")
    for (const dir of [home, tmp]) fs.mkdirSync(dir, { recursive: true })
    const workDir = fs.mkdtempSync(path.join(os.tmpdir(), `${name}-work-`))
    seedFiles(workDir, files)
    return { id, root, home, tmp, workDir }
  }

  /**
   * Spawn the run (cwd = its work dir, see spawnCli) and track it until disposed. The handle
   * carries `extra` (the harness's own directories); the result is the exit plus what `read`
   * parses from it.
   */
  const start = <Parsed extends object, Extra extends object>(
    spec: {
      readonly run: RunSetup
      readonly command: string
      readonly args: ReadonlyArray<string>
      readonly env: Readonly<Record<string, string>>
      readonly timeoutMs: number
      readonly echoStderr: boolean | undefined
      /** name in spawn-error lines */
      readonly tag: string
    },
    extra: Extra,
    read: (exit: CliExit) => Parsed
  ): CliRunProcess<CliRunResult & Parsed & { dispose(): Promise<void> }> & Extra => {
    const { id, root, workDir } = spec.run
    const { command, args, env, timeoutMs, echoStderr, tag } = spec
    const run = spawnCli({ command, args, cwd: workDir, env, marker, id, timeoutMs, ...(echoStderr !== undefined ? { echoStderr } : {}), tag, root, workDir })
    const handle: CliRunProcess<CliRunResult & Parsed & { dispose(): Promise<void> }> & Extra = {
      pid: run.pid,
      workDir,
      ...extra,
      kill: run.kill,
      dispose: () =>
        run.dispose().then(() => {
          live.delete(handle)
          runIds.delete(id)
        }),
      result: run.exited.then((exit) => ({
        exitCode: exit.code,
        signal: exit.signal,
        timedOut: exit.timedOut,
        durationMs: exit.durationMs,
        stdout: exit.stdout,
        stderr: exit.stderr,
        ...read(exit),
        workDir,
        dispose: () => handle.dispose()
      }))
    }
    live.add(handle)
    return handle
  }

  return {
    marker,
    begin,
    start,
    /** Dispose every run started and not yet disposed (for afterEach/afterAll). */
    disposeAll: async (): Promise<void> => {
      await Promise.all([...live].map((p) => p.dispose()))
    },
    /** Any process of any run still alive? (Linux; for asserting hygiene in tests.) */
    livePids: (): number[] => [...runIds].flatMap((id) => markedPids(marker, id))
  }
}

/** A one-paragraph description of a run for assertion messages. */
export const describeCliRun = (name: string, run: CliRunResult): string =>
  `${name} exit=${run.exitCode} signal=${run.signal} timedOut=${run.timedOut} ${run.durationMs}ms\n` +
  `--- stdout ---\n${run.stdout.slice(-4000)}\n--- stderr ---\n${run.stderr.slice(-4000)}`
