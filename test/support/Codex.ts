/**
 * Runs the real Codex CLI (`@openai/codex`, a Responses API client) as a child process against a
 * gateway (or any Responses server), offline, in throw-away directories.
 *
 * Usage:
 *   const gw = await startGateway({...})
 *   const run = await runCodex({ baseUrl: gw.url, prompt: "Say hi" })
 *   try {
 *     expect(run.exitCode).toBe(0)
 *     expect(codexAnswer(run)).toBe("Hello from upstream")
 *     // run.workDir still exists here: check files codex wrote
 *   } finally {
 *     await run.dispose()   // removes workDir (HOME/CODEX_HOME are already gone)
 *   }
 *   // afterEach(disposeAllCodex) kills/removes anything a failed test left behind.
 *
 * Setup (see /work/shared/design/REAL-CLIENTS.md and scratchpad/codex-capture/FINDINGS.md):
 * `$CODEX_HOME/config.toml` points model_provider `gw` (wire_api "responses", env_key GW_API_KEY)
 * at `<baseUrl>/v1`, with `[features]` off (else it goes to the internet) and `[agents] enabled =
 * false` (else it sends a `tool_search` tool). The command is
 * `codex exec --skip-git-repo-check --json --sandbox workspace-write PROMPT` with stdin on
 * /dev/null, cwd = a fresh work dir, and a minimal environment (no real keys, no proxies).
 *
 * Process hygiene: codex runs in its own process group (detached); on timeout, `kill()` or
 * `dispose()` the whole group gets SIGKILL, and any process still carrying this run's marker
 * environment variable (commands codex started that left the group) is killed too.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describeCliRun, makeRunRegistry, minimalCliEnv, parseJsonLines, type CliRunProcess, type CliRunResult } from "./CliProcess.js"
import { testClientEntry } from "./TestClients.js"

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

export type CodexSandbox = "read-only" | "workspace-write" | "danger-full-access"

export interface CodexOptions {
  /**
   * The gateway: its origin (`http://127.0.0.1:PORT`, as `TestGateway.url`) or a URL already ending
   * in `/v1`. `/v1` is appended when missing; codex then posts to `<that>/responses`.
   */
  baseUrl: string
  prompt: string
  /** Sent as `authorization: Bearer <apiKey>` (via env GW_API_KEY). Default "sk-codex-test". */
  apiKey?: string
  /** `model` in config.toml (sent as body.model). Default "gpt-5.5". */
  model?: string
  /** Hard limit; the process group is SIGKILLed when it is reached. Default 90 s. */
  timeoutMs?: number
  /** Default "workspace-write". */
  sandbox?: CodexSandbox
  /** Default true: `--json` (JSONL events on stdout, parsed into `events`). */
  json?: boolean
  /**
   * Extra keys for the `[model_providers.gw]` table. Codex retries a lot by default (a 5xx costs
   * 6 stream attempts x 5 requests, ~25 s): error-path tests want
   * `{ request_max_retries: 0, stream_max_retries: 0 }` (see `NO_RETRIES`).
   */
  provider?: Record<string, string | number | boolean>
  /** Extra TOML appended to config.toml (top-level keys must come before tables: use `-c` via extraArgs for those). */
  extraConfig?: string
  /** Extra `codex exec` arguments, inserted before the prompt (e.g. ["-c", "model_reasoning_effort=\"low\""]). */
  extraArgs?: string[]
  /** Extra environment variables (added to the minimal environment). */
  env?: Record<string, string>
  /** Files to create in the work dir before the run: relative path -> content. */
  files?: Record<string, string>
  /** Also echo codex's stderr to this process's stderr as it arrives (debugging). */
  echoStderr?: boolean
}

/** exitCode, signal, timedOut, durationMs, stdout, stderr, workDir (CliProcess.ts), plus: */
export interface CodexResult extends CliRunResult {
  /** stdout lines that parse as JSON objects (the `--json` event stream), in order. */
  events: CodexEvent[]
}

/** One `codex exec --json` line, e.g. {type:"thread.started"}, {type:"item.completed", item:{type:"agent_message", text}}, {type:"turn.completed", usage}. */
export type CodexEvent = { type?: string; [key: string]: unknown }

export interface CodexRun extends CodexResult {
  /** Kill anything left and remove the work dir. Idempotent. */
  dispose(): Promise<void>
}

/** pid, workDir, result, kill(), dispose() (CliProcess.ts), plus: */
export interface CodexProcess extends CliRunProcess<CodexRun> {
  /** CODEX_HOME (config.toml, sessions); removed as soon as codex exits. */
  readonly codexHome: string
  /** SIGKILL the process group (and marked stragglers) now; a no-op for the group once codex has exited. */
  kill(): void
}

// ---------------------------------------------------------------------------------------------
// Binary, config
// ---------------------------------------------------------------------------------------------

/** The npm entry point (`@openai/codex/bin/codex.js` in test/clients), run with this Node. */
export const codexEntry = (): string => testClientEntry("@openai/codex")

export const DEFAULT_CODEX_MODEL = "gpt-5.5"
export const DEFAULT_CODEX_KEY = "sk-codex-test"
export const DEFAULT_CODEX_TIMEOUT_MS = 90_000
/** `provider` setting for error-path tests: one request, no stream reconnects. */
export const NO_RETRIES = { request_max_retries: 0, stream_max_retries: 0 } as const

const toV1 = (baseUrl: string): string => {
  const trimmed = baseUrl.replace(/\/+$/, "")
  return trimmed.endsWith("/v1") ? trimmed : `${trimmed}/v1`
}

const tomlString = (s: string): string => JSON.stringify(s)

/** The config.toml the helper writes (exported for tests that want to inspect or extend it). */
export const codexConfigToml = (options: {
  baseUrl: string
  model?: string
  provider?: Record<string, string | number | boolean>
  extraConfig?: string
}): string =>
  [
    `model = ${tomlString(options.model ?? DEFAULT_CODEX_MODEL)}`,
    `model_provider = "gw"`,
    `check_for_update_on_startup = false`,
    ``,
    `[analytics]`,
    `enabled = false`,
    ``,
    `[features]`,
    `plugins = false`,
    `remote_plugin = false`,
    `apps = false`,
    ``,
    `[agents]`,
    `enabled = false`,
    ``,
    `[model_providers.gw]`,
    `name = "gw"`,
    `base_url = ${tomlString(toV1(options.baseUrl))}`,
    `env_key = "GW_API_KEY"`,
    `wire_api = "responses"`,
    ...Object.entries(options.provider ?? {}).map(([key, value]) => `${key} = ${typeof value === "string" ? tomlString(value) : String(value)}`),
    ``,
    options.extraConfig ?? "",
    ``
  ].join("\n")

// ---------------------------------------------------------------------------------------------
// Process bookkeeping
// ---------------------------------------------------------------------------------------------

const runs = makeRunRegistry("LLMGW_CODEX_TEST_RUN")

/** Dispose every codex process/run this module started and not yet disposed (for afterEach/afterAll). */
export const disposeAllCodex = (): Promise<void> => runs.disposeAll()

/** Any process of any run still alive? (Linux; for asserting hygiene in tests.) */
export const liveCodexPids = (): number[] => runs.livePids()

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

/** Start codex and return at once (to kill it mid-run, or to run several at a time). */
export const startCodex = (options: CodexOptions): CodexProcess => {
  const run = runs.begin("codex", options.files)
  const { root, home, tmp } = run
  const codexHome = path.join(root, "codex")
  fs.mkdirSync(codexHome, { recursive: true })
  fs.writeFileSync(
    path.join(codexHome, "config.toml"),
    codexConfigToml({
      baseUrl: options.baseUrl,
      ...(options.model !== undefined ? { model: options.model } : {}),
      ...(options.provider !== undefined ? { provider: options.provider } : {}),
      ...(options.extraConfig !== undefined ? { extraConfig: options.extraConfig } : {})
    })
  )

  const env: Record<string, string> = {
    ...minimalCliEnv({ home, tmp }),
    CODEX_HOME: codexHome,
    GW_API_KEY: options.apiKey ?? DEFAULT_CODEX_KEY,
    [runs.marker]: run.id,
    ...options.env
  }

  const args = [
    codexEntry(),
    "exec",
    "--skip-git-repo-check",
    ...(options.json === false ? [] : ["--json"]),
    "--sandbox",
    options.sandbox ?? "workspace-write",
    ...(options.extraArgs ?? []),
    "--",
    options.prompt
  ]

  return runs.start(
    {
      run,
      command: process.execPath,
      args,
      env,
      timeoutMs: options.timeoutMs ?? DEFAULT_CODEX_TIMEOUT_MS,
      echoStderr: options.echoStderr,
      tag: "Codex.ts"
    },
    { codexHome },
    (exit) => ({ events: parseJsonLines<CodexEvent>(exit.stdout) })
  )
}

/** Run codex to completion (or the hard timeout). The work dir is kept until `dispose()`. */
export const runCodex = (options: CodexOptions): Promise<CodexRun> => startCodex(options).result

// ---------------------------------------------------------------------------------------------
// Reading the result
// ---------------------------------------------------------------------------------------------

/** The items of `item.completed` events (agent_message, command_execution, file_change, reasoning, error...). */
export const codexItems = (run: CodexResult): Array<{ type?: string; [key: string]: unknown }> =>
  run.events
    .filter((e) => e.type === "item.completed")
    .map((e) => e.item as { type?: string; [key: string]: unknown })
    .filter((item) => item !== undefined && item !== null)

/** The text of the last `agent_message` item (the final answer), or undefined. */
export const codexAnswer = (run: CodexResult): string | undefined => {
  const messages = codexItems(run).filter((item) => item.type === "agent_message")
  const last = messages[messages.length - 1]
  return last === undefined ? undefined : (last.text as string | undefined)
}

/** A one-paragraph description of a run for assertion messages. */
export const describeCodexRun = (run: CodexResult): string => describeCliRun("codex", run)
