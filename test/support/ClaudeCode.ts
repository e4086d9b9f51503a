/**
 * Runs the real Claude Code CLI (`@anthropic-ai/claude-code`, a Messages API client) as a child
 * process against a gateway (or any Messages server), offline, in throw-away directories.
 *
 * Usage:
 *   const gw = await startGateway({...})
 *   const run = await runClaudeCode({ baseUrl: gw.url, apiKey: KEY, prompt: "Say hi" })
 *   try {
 *     expect(run.exitCode, describeClaudeCodeRun(run)).toBe(0)
 *     expect(run.resultText).toBe("Hello from upstream")
 *   } finally {
 *     await run.dispose()   // removes workDir (HOME is already gone)
 *   }
 *   // afterEach(disposeAllClaudeCode) kills/removes anything a failed test left behind.
 *
 * Setup (see /work/shared/design/REAL-CLIENTS.md): `claude -p PROMPT --output-format stream-json
 * --verbose [--model M] [--allowedTools ...]` with stdin on /dev/null, a temp HOME, cwd = a fresh
 * work dir, env ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY, the non-essential traffic, auto-updater,
 * telemetry and error reporting switched off, and nothing else from this process's environment.
 * It then sends `HEAD <base>/` and `POST <base>/v1/messages?beta=true` only.
 *
 * Process hygiene: claude runs in its own process group (detached); on timeout, `kill()` or
 * `dispose()` the whole group gets SIGKILL, and any process still carrying this run's marker
 * environment variable (commands claude started that left the group) is killed too.
 */
import { describeCliRun, makeRunRegistry, minimalCliEnv, parseJsonLines, type CliRunProcess, type CliRunResult } from "./CliProcess.js"
import { testClientEntry } from "./TestClients.js"

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

export interface ClaudeCodeOptions {
  /** The gateway origin (`http://127.0.0.1:PORT`); claude posts to `<baseUrl>/v1/messages`. */
  baseUrl: string
  prompt: string
  /** Sent as `x-api-key` (env ANTHROPIC_API_KEY). Default "sk-claude-code-test". */
  apiKey?: string
  /** `--model` (an alias such as "haiku"/"sonnet"/"opus", or a full id). Default: claude's own default. */
  model?: string
  /** `--allowedTools` entries, e.g. ["Bash(echo:*)"]. */
  allowedTools?: string[]
  /** Hard limit; the process group is SIGKILLed when it is reached. Default 90 s. */
  timeoutMs?: number
  /** Extra `claude` arguments, inserted before `-p`. */
  extraArgs?: string[]
  /** Extra environment variables (added to the minimal environment). */
  env?: Record<string, string>
  /** Variables of the default environment to leave out (e.g. CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, which also stops gateway model discovery). */
  omitEnv?: string[]
  /** Files to create in the work dir before the run: relative path -> content. */
  files?: Record<string, string>
  /** Also echo claude's stderr to this process's stderr as it arrives (debugging). */
  echoStderr?: boolean
}

/** One `--output-format stream-json` line: {type:"system",subtype:"init"}, {type:"assistant",message}, {type:"user",message}, {type:"result",result,...}. */
export type ClaudeCodeEvent = { type?: string; subtype?: string; [key: string]: unknown }

/** exitCode, signal, timedOut, durationMs, stdout, stderr, workDir (CliProcess.ts), plus: */
export interface ClaudeCodeResult extends CliRunResult {
  /** stdout lines that parse as JSON objects, in order. */
  events: ClaudeCodeEvent[]
  /** The last `{type:"result"}` event, if any. */
  resultEvent: ClaudeCodeEvent | undefined
  /** `resultEvent.result` when it is a string (the final answer). */
  resultText: string | undefined
}

export interface ClaudeCodeRun extends ClaudeCodeResult {
  /** Kill anything left and remove the work dir. Idempotent. */
  dispose(): Promise<void>
}

/** pid, workDir, result, kill(), dispose() (CliProcess.ts). */
export type ClaudeCodeProcess = CliRunProcess<ClaudeCodeRun>

// ---------------------------------------------------------------------------------------------
// Binary
// ---------------------------------------------------------------------------------------------

/** The native binary the package's postinstall placed (`@anthropic-ai/claude-code/bin/claude.exe` in test/clients). */
export const claudeCodeBinary = (): string => testClientEntry("@anthropic-ai/claude-code")

export const DEFAULT_CLAUDE_CODE_KEY = "sk-claude-code-test"
export const DEFAULT_CLAUDE_CODE_TIMEOUT_MS = 90_000

// ---------------------------------------------------------------------------------------------
// Process bookkeeping
// ---------------------------------------------------------------------------------------------

const runs = makeRunRegistry("LLMGW_CLAUDE_CODE_TEST_RUN")

/** Dispose every claude process/run this module started and not yet disposed (for afterEach/afterAll). */
export const disposeAllClaudeCode = (): Promise<void> => runs.disposeAll()

/** Any process of any run still alive? (Linux; for asserting hygiene in tests.) */
export const liveClaudeCodePids = (): number[] => runs.livePids()

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/** Start claude and return at once (to kill it mid-run, or to run several at a time). */
export const startClaudeCode = (options: ClaudeCodeOptions): ClaudeCodeProcess => {
  const run = runs.begin("claude-code", options.files)
  const { home, tmp } = run

  const env: Record<string, string> = {
    ...minimalCliEnv({ home, tmp, shell: "/bin/bash" }),
    ANTHROPIC_BASE_URL: options.baseUrl.replace(/\/+$/, ""),
    ANTHROPIC_API_KEY: options.apiKey ?? DEFAULT_CLAUDE_CODE_KEY,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    [runs.marker]: run.id,
    ...options.env
  }
  for (const name of options.omitEnv ?? []) delete env[name]

  const args = [
    ...(options.extraArgs ?? []),
    "-p",
    options.prompt,
    "--output-format",
    "stream-json",
    "--verbose",
    ...(options.model !== undefined ? ["--model", options.model] : []),
    ...(options.allowedTools !== undefined && options.allowedTools.length > 0 ? ["--allowedTools", ...options.allowedTools] : [])
  ]

  return runs.start(
    {
      run,
      command: claudeCodeBinary(),
      args,
      env,
      timeoutMs: options.timeoutMs ?? DEFAULT_CLAUDE_CODE_TIMEOUT_MS,
      echoStderr: options.echoStderr,
      tag: "ClaudeCode.ts"
    },
    {},
    (exit) => {
      const events = parseJsonLines<ClaudeCodeEvent>(exit.stdout)
      const results = events.filter((e) => e.type === "result")
      const resultEvent = results[results.length - 1]
      return { events, resultEvent, resultText: typeof resultEvent?.result === "string" ? resultEvent.result : undefined }
    }
  )
}

/** Run claude to completion (or the hard timeout). The work dir is kept until `dispose()`. */
export const runClaudeCode = (options: ClaudeCodeOptions): Promise<ClaudeCodeRun> => startClaudeCode(options).result

// ---------------------------------------------------------------------------------------------
// Reading the result
// ---------------------------------------------------------------------------------------------

/** A one-paragraph description of a run for assertion messages. */
export const describeClaudeCodeRun = (run: ClaudeCodeResult): string => describeCliRun("claude", run)
