import type { ChildProcess } from "node:child_process"
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
