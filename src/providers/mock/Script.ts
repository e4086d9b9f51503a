import type { FinishReason } from "../../domain/Canonical.js"

/**
 * The mock provider's directive language. Lines of the last user message that start with `::` are
 * directives; every other line is plain text. Parsing is pure and total: an unknown or malformed
 * directive line is dropped, never an error, so a script can never make the mock itself fail.
 */

/** The failures `::error <kind>` can produce, with the upstream status each one pretends to have. */
export const mockErrors = {
  rate_limited: { status: 429, retryAfter: 1 },
  overloaded: { status: 529 },
  unavailable: { status: 503 },
  server_error: { status: 500 },
  bad_request: { status: 400 },
  timeout: {},
  connection: {},
  bad_response: { status: 200 }
} as const satisfies Record<string, { readonly status?: number; readonly retryAfter?: number }>

export type MockErrorKind = keyof typeof mockErrors

const errorKinds: ReadonlyArray<string> = Object.keys(mockErrors)
const isErrorKind = (s: string): s is MockErrorKind => errorKinds.includes(s)

const finishReasons: ReadonlyArray<string> = ["stop", "length", "tool_calls", "content_filter"]
const isFinishReason = (s: string): s is FinishReason => finishReasons.includes(s)

/** The largest `::chunks` count; larger counts are capped to it. */
export const maxChunks = 100_000

/** A tool call asked for by `::tool <name> <json-arguments>`. */
export interface ScriptedToolCall {
  readonly name: string
  /** the JSON text exactly as written (not validated), `{}` when absent */
  readonly arguments: string
}

/** What a user message asks the mock to do. */
export interface Script {
  /** the non-directive lines, joined with "\n" and trimmed */
  readonly text: string
  /** `::text` lines joined with "\n"; replaces the echo when present */
  readonly answer?: string
  /** `::reason` lines joined with "\n" */
  readonly reasoning?: string
  /** `::signature`: carried by the last reasoning delta (last one wins) */
  readonly signature?: string
  /** `::tool` lines, in order */
  readonly tools: ReadonlyArray<ScriptedToolCall>
  /** `::chunks <n>`: answer with n deltas "chunk 0 ", "chunk 1 ", ... */
  readonly chunks?: number
  /** `::delay <ms>`: wait before each event */
  readonly delayMs?: number
  /** `::error <kind> [after]` */
  readonly error?: { readonly kind: MockErrorKind; readonly after: boolean }
  /** `::finish <reason>` */
  readonly finish?: FinishReason
  /** `::usage <input> <output>` */
  readonly usage?: { readonly input: number; readonly output: number }
}

const directiveLine = /^::([A-Za-z_]+)(?:\s([\s\S]*))?$/
const nonNegativeInt = (s: string | undefined): number | undefined =>
  s !== undefined && /^\d+$/.test(s) ? Number(s) : undefined
const words = (s: string): Array<string> => s.trim().split(/\s+/).filter((w) => w !== "")
const append = (previous: string | undefined, line: string): string =>
  previous === undefined ? line : `${previous}\n${line}`

/** Split a user message into plain text and directives, processing directives in order. */
export const parseScript = (input: string): Script => {
  const plain: Array<string> = []
  const tools: Array<ScriptedToolCall> = []
  let answer: string | undefined
  let reasoning: string | undefined
  let signature: string | undefined
  let chunks: number | undefined
  let delayMs: number | undefined
  let error: Script["error"]
  let finish: FinishReason | undefined
  let usage: Script["usage"]

  for (const line of input.split(/\r?\n/)) {
    if (!line.startsWith("::")) {
      plain.push(line)
      continue
    }
    const match = directiveLine.exec(line)
    if (match === null) continue
    const name = match[1].toLowerCase()
    const rest = match[2] ?? ""
    const args = words(rest)
    switch (name) {
      case "text":
        answer = append(answer, rest)
        break
      case "reason":
        reasoning = append(reasoning, rest)
        break
      case "signature":
        if (args.length > 0) signature = rest.trim()
        break
      case "tool": {
        const tool = /^(\S+)(?:\s+([\s\S]*))?$/.exec(rest.trim())
        if (tool !== null) tools.push({ name: tool[1], arguments: (tool[2] ?? "").trim() || "{}" })
        break
      }
      case "chunks": {
        const n = nonNegativeInt(args[0])
        if (n !== undefined) chunks = Math.min(n, maxChunks)
        break
      }
      case "delay":
        delayMs = nonNegativeInt(args[0]) ?? delayMs
        break
      case "error":
        if (args[0] !== undefined && isErrorKind(args[0])) error = { kind: args[0], after: args[1] === "after" }
        break
      case "finish":
        if (args[0] !== undefined && isFinishReason(args[0])) finish = args[0]
        break
      case "usage": {
        const input = nonNegativeInt(args[0])
        const output = nonNegativeInt(args[1])
        if (input !== undefined && output !== undefined) usage = { input, output }
        break
      }
    }
  }

  return {
    text: plain.join("\n").trim(),
    tools,
    ...(answer !== undefined ? { answer } : {}),
    ...(reasoning !== undefined ? { reasoning } : {}),
    ...(signature !== undefined ? { signature } : {}),
    ...(chunks !== undefined ? { chunks } : {}),
    ...(delayMs !== undefined ? { delayMs } : {}),
    ...(error !== undefined ? { error } : {}),
    ...(finish !== undefined ? { finish } : {}),
    ...(usage !== undefined ? { usage } : {})
  }
}
