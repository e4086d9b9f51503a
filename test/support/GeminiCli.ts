/**
 * Runs the real Gemini CLI (`@google/gemini-cli`, a Gemini API client) as a child process against a
 * gateway (or any Gemini API server), offline, in throw-away directories.
 *
 * Usage:
 *   const gw = await startGateway({...})
 *   const run = await runGeminiCli({ baseUrl: gw.url, apiKey: KEY, model: "gemini-2.5-flash", prompt: "Say hi" })
 *   try {
 *     expect(run.exitCode, describeGeminiCliRun(run)).toBe(0)
 *     expect(run.responseText).toBe("Hello from upstream")
 *     // run.workDir still exists here: check files the CLI wrote
 *   } finally {
 *     await run.dispose()   // removes workDir (HOME is already gone)
 *   }
 *   // afterEach(disposeAllGeminiCli) kills/removes anything a failed test left behind.
 *
 * Setup (see /work/shared/design/REAL-CLIENTS.md and scratchpad/gemini-capture/FINDINGS.md):
 * `$HOME/.gemini/settings.json` selects API-key auth and switches off auto update, usage statistics,
 * telemetry, IDE integration, checkpointing and the extension registry; the command is
 * `gemini [-m MODEL] [--approval-mode MODE] -o json -p PROMPT` with stdin on /dev/null, cwd = a fresh
 * work dir, env GEMINI_API_KEY / GOOGLE_GEMINI_BASE_URL / GEMINI_CLI_TRUST_WORKSPACE=true, the system
 * settings paths pointed into the run's private directory, and nothing else from this process's
 * environment. It then sends `POST <baseUrl>/v1beta/models/{model}:streamGenerateContent?alt=sse`
 * (and, without `model`, a routing `:generateContent` call first) and nothing else.
 *
 * The CLI relaunches itself (a child node process with more heap): both carry the run's marker.
 *
 * Process hygiene: the CLI runs in its own process group (detached); on timeout, `kill()` or
 * `dispose()` the whole group gets SIGKILL, and any process still carrying this run's marker
 * environment variable (commands the CLI started that left the group) is killed too.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describeCliRun, makeRunRegistry, minimalCliEnv, parseJsonLines, type CliRunProcess, type CliRunResult } from "./CliProcess.js"
import { testClientEntry } from "./TestClients.js"

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

export type GeminiCliApprovalMode = "default" | "auto_edit" | "yolo" | "plan"
export type GeminiCliOutputFormat = "json" | "stream-json" | "text"

export interface GeminiCliOptions {
  /**
   * The gateway origin (`http://127.0.0.1:PORT`, as `TestGateway.url`), set as GOOGLE_GEMINI_BASE_URL.
   * The CLI (via @google/genai) posts to `<baseUrl>/v1beta/models/{model}:streamGenerateContent?alt=sse`.
   */
  baseUrl: string
  prompt: string
  /** Sent as `x-goog-api-key` (env GEMINI_API_KEY). Default "gemini-cli-test-key". */
  apiKey?: string
  /**
   * `-m MODEL` (sent in the URL path). Default: none, i.e. the CLI's "auto" routing: a classifier
   * `:generateContent` call (with `responseJsonSchema`) before every turn's main request.
   */
  model?: string
  /** `--approval-mode`; default: the CLI's own ("default": tools needing approval are refused headless). */
  approvalMode?: GeminiCliApprovalMode
  /** `-o`; default "json" (one JSON object on stdout, parsed into `output`). */
  outputFormat?: GeminiCliOutputFormat
  /** Hard limit; the process group is SIGKILLed when it is reached. Default 90 s. */
  timeoutMs?: number
  /**
   * Deep-merged over the default `settings.json` (objects merge, everything else replaces), e.g.
   * `NO_RETRIES` for error-path tests, or `{ tools: { core: ["list_directory"] } }`.
   */
  settings?: Record<string, unknown>
  /** Extra `gemini` arguments, inserted before `-p`. */
  extraArgs?: string[]
  /** Extra environment variables (added to the minimal environment). */
  env?: Record<string, string>
  /** Files to create in the work dir before the run: relative path -> content. */
  files?: Record<string, string>
  /** Also echo the CLI's stderr to this process's stderr as it arrives (debugging). */
  echoStderr?: boolean
}

/** The `-o json` object: {session_id, response, stats:{models,tools,files}, error?:{type,message,code?}, warnings?}. */
export interface GeminiCliJsonOutput {
  session_id?: string
  response?: string
  stats?: { models?: Record<string, unknown>; tools?: Record<string, unknown>; files?: Record<string, unknown>; [key: string]: unknown }
  error?: { type?: string; message?: string; code?: string | number; [key: string]: unknown }
  warnings?: string[]
  [key: string]: unknown
}

/** One `-o stream-json` line: {type:"init"|"message"|"tool_use"|"tool_result"|"error"|"result", ...}. */
export type GeminiCliEvent = { type?: string; [key: string]: unknown }

/** signal, timedOut, durationMs, stdout, stderr, workDir (CliProcess.ts), plus: */
export interface GeminiCliResult extends CliRunResult {
  /**
   * Exit code; null when killed by a signal. An API error exits with its HTTP status mod 256
   * (500 -> 244, 400 -> 144, 429 -> 173); other failures: 1, or 41 auth / 42 input / 44 sandbox /
   * 52 config / 53 turn limit / 54 tool / 55 untrusted workspace / 130 cancelled.
   */
  exitCode: number | null
  /**
   * `-o json`: the parsed output object, else undefined. On success it is stdout; on failure the CLI
   * prints `{session_id, error:{type,message,code}}` to stderr (stdout empty) and that is parsed.
   */
  output: GeminiCliJsonOutput | undefined
  /** `-o stream-json`: the JSON lines of stdout, in order (empty otherwise). */
  events: GeminiCliEvent[]
  /**
   * The answer: `output.response` (json), the concatenated assistant `message` contents
   * (stream-json), or the trimmed stdout (text, exit 0 only).
   */
  responseText: string | undefined
  /** `output.error` (json) or the `result` event's error (stream-json), if any. */
  error: { type?: string; message?: string; [key: string]: unknown } | undefined
}

export interface GeminiCliRun extends GeminiCliResult {
  /** Kill anything left and remove the work dir. Idempotent. */
  dispose(): Promise<void>
}

/** pid, workDir, result, kill(), dispose() (CliProcess.ts), plus: */
export interface GeminiCliProcess extends CliRunProcess<GeminiCliRun> {
  /** The temp HOME (`.gemini/settings.json`, session files); removed as soon as the CLI exits. */
  readonly home: string
}

// ---------------------------------------------------------------------------------------------
// Entry point and settings
// ---------------------------------------------------------------------------------------------

/** The CLI's bundled entry (`@google/gemini-cli/bundle/gemini.js` in test/clients), run with this process's node. */
export const geminiCliEntry = (): string => testClientEntry("@google/gemini-cli")

export const DEFAULT_GEMINI_CLI_KEY = "gemini-cli-test-key"
export const DEFAULT_GEMINI_CLI_TIMEOUT_MS = 90_000

/**
 * `settings` for error-path tests: one attempt per main request. (By default the CLI retries a
 * failed request up to 10 times with backoff, 429/5xx and network errors alike.) The routing call
 * made without `model` ignores this and retries a 5xx 5 times (~60 s): pass `model` in error tests.
 */
export const NO_RETRIES = { general: { maxAttempts: 1, retryFetchErrors: false } } as const

/**
 * The default `~/.gemini/settings.json`: REAL-CLIENTS.md's four settings plus everything else that
 * could reach the network or the machine outside the work dir (see FINDINGS.md).
 */
export const defaultGeminiCliSettings = (): Record<string, unknown> => ({
  security: { auth: { selectedType: "gemini-api-key" } },
  general: {
    enableAutoUpdate: false,
    enableAutoUpdateNotification: false,
    checkpointing: { enabled: false },
    enableNotifications: false
  },
  privacy: { usageStatisticsEnabled: false },
  telemetry: { enabled: false, logPrompts: false },
  ide: { enabled: false },
  advanced: { autoConfigureMemory: false, ignoreLocalEnv: true },
  context: { fileFiltering: { enableFileWatcher: false } },
  experimental: { extensionRegistry: false, autoMemory: false }
})

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value)

/** Objects merge key by key; anything else (arrays included) in `over` replaces. */
export const mergeSettings = (base: Record<string, unknown>, over: Record<string, unknown> | undefined): Record<string, unknown> => {
  const out: Record<string, unknown> = { ...base }
  for (const [key, value] of Object.entries(over ?? {})) {
    const prev = out[key]
    out[key] = isPlainObject(prev) && isPlainObject(value) ? mergeSettings(prev, value) : value
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Process bookkeeping
// ---------------------------------------------------------------------------------------------

const runs = makeRunRegistry("LLMGW_GEMINI_CLI_TEST_RUN")

/** Dispose every Gemini CLI process/run this module started and not yet disposed (for afterEach/afterAll). */
export const disposeAllGeminiCli = (): Promise<void> => runs.disposeAll()

/** Any process of any run still alive? (Linux; for asserting hygiene in tests.) */
export const liveGeminiCliPids = (): number[] => runs.livePids()

// ---------------------------------------------------------------------------------------------
// Output parsing
// ---------------------------------------------------------------------------------------------

/**
 * The `-o json` object. The CLI pretty-prints one object (multi-line) as the last thing on stdout
 * (or, on failure, on stderr after a stack trace); anything before it is skipped.
 */
export const parseGeminiJsonOutput = (stdout: string): GeminiCliJsonOutput | undefined => {
  const tryParse = (text: string): GeminiCliJsonOutput | undefined => {
    try {
      const value: unknown = JSON.parse(text)
      return isPlainObject(value) ? (value as GeminiCliJsonOutput) : undefined
    } catch {
      return undefined
    }
  }
  const whole = tryParse(stdout.trim())
  if (whole !== undefined) return whole
  // the last line-initial "{" from which the rest parses
  const starts: number[] = []
  for (let i = 0; i < stdout.length; i++) if (stdout[i] === "{" && (i === 0 || stdout[i - 1] === "\n")) starts.push(i)
  for (const start of starts.reverse()) {
    const parsed = tryParse(stdout.slice(start).trim())
    if (parsed !== undefined) return parsed
  }
  return undefined
}

const streamAnswer = (events: GeminiCliEvent[]): string | undefined => {
  const parts = events
    .filter((e) => e.type === "message" && e.role === "assistant" && typeof e.content === "string")
    .map((e) => e.content as string)
  return parts.length === 0 ? undefined : parts.join("")
}

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/** Start the CLI and return at once (to kill it mid-run, or to run several at a time). */
export const startGeminiCli = (options: GeminiCliOptions): GeminiCliProcess => {
  const run = runs.begin("gemini-cli", options.files)
  const { root, home, tmp } = run
  const geminiDir = path.join(home, ".gemini")
  fs.mkdirSync(geminiDir, { recursive: true })
  fs.writeFileSync(
    path.join(geminiDir, "settings.json"),
    JSON.stringify(mergeSettings(defaultGeminiCliSettings(), options.settings), null, 2) + "\n"
  )
  const outputFormat = options.outputFormat ?? "json"

  const env: Record<string, string> = {
    ...minimalCliEnv({ home, tmp, shell: "/bin/bash" }),
    GEMINI_API_KEY: options.apiKey ?? DEFAULT_GEMINI_CLI_KEY,
    GOOGLE_GEMINI_BASE_URL: options.baseUrl.replace(/\/+$/, ""),
    GEMINI_CLI_TRUST_WORKSPACE: "true",
    // machine-wide settings (/etc/gemini-cli/settings.json, system-defaults.json) must not apply
    GEMINI_CLI_SYSTEM_SETTINGS_PATH: path.join(root, "system-settings.json"),
    GEMINI_CLI_SYSTEM_DEFAULTS_PATH: path.join(root, "system-defaults.json"),
    [runs.marker]: run.id,
    ...options.env
  }

  const args = [
    geminiCliEntry(),
    ...(options.model !== undefined ? ["-m", options.model] : []),
    ...(options.approvalMode !== undefined ? ["--approval-mode", options.approvalMode] : []),
    "-o",
    outputFormat,
    ...(options.extraArgs ?? []),
    "-p",
    options.prompt
  ]

  return runs.start(
    {
      run,
      command: process.execPath,
      args,
      env,
      timeoutMs: options.timeoutMs ?? DEFAULT_GEMINI_CLI_TIMEOUT_MS,
      echoStderr: options.echoStderr,
      tag: "GeminiCli.ts"
    },
    { home },
    (exit) => {
      // on failure the `{session_id, error}` object goes to stderr (after a stack trace), stdout stays empty
      const output =
        outputFormat === "json" ? (parseGeminiJsonOutput(exit.stdout) ?? parseGeminiJsonOutput(exit.stderr)) : undefined
      const events = outputFormat === "stream-json" ? parseJsonLines<GeminiCliEvent>(exit.stdout) : []
      const resultEvent = [...events].reverse().find((e) => e.type === "result")
      const responseText =
        outputFormat === "json"
          ? typeof output?.response === "string"
            ? output.response
            : undefined
          : outputFormat === "stream-json"
            ? streamAnswer(events)
            : exit.code === 0
              ? exit.stdout.trim()
              : undefined
      const error =
        outputFormat === "json"
          ? output?.error
          : isPlainObject(resultEvent?.error)
            ? (resultEvent.error as GeminiCliResult["error"])
            : undefined
      return { output, events, responseText, error }
    }
  )
}

/** Run the CLI to completion (or the hard timeout). The work dir is kept until `dispose()`. */
export const runGeminiCli = (options: GeminiCliOptions): Promise<GeminiCliRun> => startGeminiCli(options).result

// ---------------------------------------------------------------------------------------------
// Reading the result
// ---------------------------------------------------------------------------------------------

/** A one-paragraph description of a run for assertion messages. */
export const describeGeminiCliRun = (run: GeminiCliResult): string => describeCliRun("gemini", run)
