import { spawn, type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

/**
 * What the real-CLI harnesses (Codex, Claude Code) share: every run's processes carry a marker
 * variable so that nothing a CLI started can outlive the test, and their output is JSON lines.
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
