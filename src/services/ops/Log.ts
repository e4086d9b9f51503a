import { Context, Layer } from "effect"

/**
 * Structured JSON log lines on stdout. Callers pass fields, never a URL, a query or a key; provider
 * error text never reaches here either (UpstreamError messages are the gateway's own).
 */
export class Log extends Context.Tag("gateway/Log")<
  Log,
  {
    readonly info: (event: string, fields?: Record<string, unknown>) => void
    readonly error: (event: string, fields?: Record<string, unknown>) => void
    /** whether one line per request is written */
    readonly requests: boolean
  }
>() {
  static readonly make = (requests: boolean, write: (line: string) => void = (line) => process.stdout.write(line)) => {
    const emit = (level: string) => (event: string, fields?: Record<string, unknown>) =>
      write(JSON.stringify({ time: new Date().toISOString(), level, event, ...fields }) + "\n")
    return Log.of({ info: emit("info"), error: emit("error"), requests })
  }

  static readonly layer = (requests: boolean) => Layer.sync(Log, () => Log.make(requests))

  /** Collects lines in memory (tests). */
  static readonly layerMemory = (lines: Array<Record<string, unknown>>) =>
    Layer.sync(Log, () => Log.make(true, (line) => void lines.push(JSON.parse(line) as Record<string, unknown>)))
}
