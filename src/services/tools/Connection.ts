import { Client, StreamableHTTPClientTransport, type CallToolResult, type Tool } from "@modelcontextprotocol/client"
import { getDefaultEnvironment, StdioClientTransport } from "@modelcontextprotocol/client/stdio"
import { Redacted } from "effect"
import type { ToolServerConfig } from "../../Config.js"
import { mcpFetch, type McpFetch } from "./McpFetch.js"

/**
 * One live MCP session with one tool server (or, for a `perApp` server, with one app's process of
 * it): connected at start or on first need, its tool list held and refreshed on
 * `notifications/tools/list_changed`, reconnected with backoff when it drops. Plain Promise code
 * around the SDK's client; `ToolServers` gives it an Effect face.
 */

/** A tool as its server lists it. */
export interface ServerTool {
  readonly name: string
  readonly description?: string
  readonly inputSchema: { readonly [key: string]: unknown }
}

/** A tool call's outcome: the server's result, or why there is none. */
export type CallOutcome = { readonly _tag: "Result"; readonly result: CallToolResult } | { readonly _tag: "Failed"; readonly reason: string; readonly timedOut: boolean }

export type ConnectionState =
  | { readonly _tag: "Connecting" }
  | { readonly _tag: "Ready"; readonly tools: ReadonlyArray<ServerTool> }
  | { readonly _tag: "Down"; readonly reason: string }

/** What a connection tells its owner: its tool list changed (or it came up or went down). */
export type ChangeListener = () => void

/** A promise and its resolver (Node 20 has no `Promise.withResolvers`). */
const signal = () => {
  let resolve = () => {}
  const promise = new Promise<void>((r) => (resolve = r))
  return { promise, resolve }
}

const RETRY_MIN_MS = 500
const RETRY_MAX_MS = 30_000

/** The client's name in `initialize`: the gateway, never the calling app or user. */
const clientInfo = { name: "llm-gateway", version: "0.1.0" }

/** Why a server is not ready, in words that hold no URL, header or server-sent text. */
const reasonOf = (error: unknown): string => {
  const code = (error as { code?: unknown })?.code
  if (typeof code === "string" && /^E[A-Z]+$/.test(code)) return `cannot connect (${code})`
  const status = (error as { status?: unknown; statusCode?: unknown })?.status ?? (error as { statusCode?: unknown })?.statusCode
  if (typeof status === "number") return `answered HTTP ${status}`
  const name = error instanceof Error ? error.name : "Error"
  return name === "Error" ? "connection failed" : `connection failed (${name})`
}

const toTools = (tools: ReadonlyArray<Tool>): ReadonlyArray<ServerTool> =>
  tools.map((t) => ({
    name: t.name,
    ...(t.description !== undefined ? { description: t.description } : {}),
    inputSchema: t.inputSchema as { readonly [key: string]: unknown }
  }))

export class Connection {
  state: ConnectionState = { _tag: "Connecting" }
  /** resolved whenever the state changes (and replaced) */
  private changed = signal()
  private client: Client | undefined
  private retryMs = RETRY_MIN_MS
  private retryTimer: NodeJS.Timeout | undefined
  private closed = false
  /** bumps on every (re)connect: a late event of an old client is ignored */
  private generation = 0
  /** an HTTP server's requests: one keep-alive pool for the connection's life, reconnects included */
  private fetch: McpFetch | undefined

  constructor(
    /** `search`, or `files@team-a` for a per-app process */
    readonly label: string,
    private readonly config: ToolServerConfig,
    private readonly cwd: string | undefined,
    private readonly onChange: ChangeListener
  ) {}

  /** the state now (a method: a field read after an await is not narrowed by an earlier check) */
  current(): ConnectionState {
    return this.state
  }

  private setState(state: ConnectionState) {
    this.state = state
    const was = this.changed
    this.changed = signal()
    was.resolve()
    this.onChange()
  }

  private transport() {
    const config = this.config
    if (config.url !== undefined) {
      const headers: Record<string, string> = {}
      for (const [name, value] of Object.entries(config.headers ?? {})) headers[name] = Redacted.value(value)
      this.fetch ??= mcpFetch()
      return new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers }, fetch: this.fetch })
    }
    const [command, ...args] = config.command ?? []
    const env: Record<string, string> = { ...getDefaultEnvironment() }
    for (const [name, value] of Object.entries(config.env ?? {})) env[name] = Redacted.value(value)
    const transport = new StdioClientTransport({ command, args, env, stderr: "pipe", ...(this.cwd !== undefined ? { cwd: this.cwd } : {}) })
    // the server's own log: read and dropped (it may echo arguments, and a full pipe would stall it)
    transport.stderr?.on("data", () => {})
    return transport
  }

  /** Connect (or reconnect) and list the tools. */
  start(): void {
    if (this.closed) return
    const generation = ++this.generation
    const current = () => generation === this.generation && !this.closed
    const client = new Client(clientInfo, {
      capabilities: {},
      // HTTP servers are asked for the 2026-07-28 revision first, falling back to the 2025
      // handshake; a stdio server gets the 2025 handshake at once (probing would start it twice)
      versionNegotiation: { mode: this.config.url !== undefined ? "auto" : "legacy" },
      listChanged: {
        tools: {
          onChanged: (error, tools) => {
            if (!current()) return
            if (error !== null && error !== undefined) return void this.refresh(client, generation)
            if (tools !== null && tools !== undefined) this.setState({ _tag: "Ready", tools: toTools(tools) })
          }
        }
      }
    })
    const transport = this.transport()
    client.onclose = () => {
      if (!current()) return
      this.client = undefined
      this.setState({ _tag: "Down", reason: "connection closed" })
      this.retry()
    }
    const bound = this.config.readyTimeoutMs
    client
      .connect(transport, { timeout: bound })
      .then(() => client.listTools(undefined, { timeout: bound }))
      .then(
        (listed) => {
          if (!current()) return void client.close().catch(() => undefined)
          this.client = client
          this.retryMs = RETRY_MIN_MS
          this.setState({ _tag: "Ready", tools: toTools(listed.tools) })
        },
        (error: unknown) => {
          client.onclose = undefined
          void client.close().catch(() => undefined)
          if (!current()) return
          this.setState({ _tag: "Down", reason: reasonOf(error) })
          this.retry()
        }
      )
  }

  /** A changed list that the SDK could not fetch itself: list again, or reconnect. */
  private refresh(client: Client, generation: number) {
    client.listTools(undefined, { timeout: this.config.readyTimeoutMs }).then(
      (listed) => {
        if (generation === this.generation && !this.closed) this.setState({ _tag: "Ready", tools: toTools(listed.tools) })
      },
      () => undefined
    )
  }

  private retry() {
    if (this.closed || this.retryTimer !== undefined) return
    const wait = this.retryMs
    this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2)
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined
      this.start()
    }, wait)
    this.retryTimer.unref()
  }

  /**
   * The tools once the server is ready, or `undefined` when it is not within `waitMs`. A server
   * down waits too: its next reconnect may come in time. A request asking sooner than the backoff
   * would try makes a reconnect now.
   */
  async ready(waitMs: number): Promise<ReadonlyArray<ServerTool> | undefined> {
    if (this.state._tag === "Ready") return this.state.tools
    if (this.state._tag === "Down" && this.retryTimer !== undefined) {
      clearTimeout(this.retryTimer)
      this.retryTimer = undefined
      this.setState({ _tag: "Connecting" })
      this.start()
    }
    const deadline = Date.now() + waitMs
    while (!this.closed) {
      const left = deadline - Date.now()
      if (left <= 0) return undefined
      let timer: NodeJS.Timeout | undefined
      await Promise.race([this.changed.promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, left)))])
      clearTimeout(timer)
      const state = this.current()
      if (state._tag === "Ready") return state.tools
    }
    return undefined
  }

  /** Call a tool: its result, or the reason it has none (never a throw). */
  async call(tool: string, args: Record<string, unknown>, signal: AbortSignal): Promise<CallOutcome> {
    const client = this.client
    const failed = (reason: string, timedOut = false): CallOutcome => ({ _tag: "Failed", reason, timedOut })
    if (client === undefined) return failed("the tool server is not connected")
    try {
      return { _tag: "Result", result: await client.callTool({ name: tool, arguments: args }, { timeout: this.config.timeoutMs, signal }) }
    } catch (error) {
      if (signal.aborted) return failed("the call was cancelled")
      const code = (error as { code?: unknown })?.code
      // -32001: the SDK's request timeout
      if (code === -32001 || (error instanceof Error && /timed? ?out/i.test(error.message))) return failed(`the tool did not answer within ${this.config.timeoutMs} ms`, true)
      if (typeof code === "number") return failed(`the tool server refused the call (JSON-RPC error ${code})`)
      return failed("the tool server failed during the call")
    }
  }

  async close(): Promise<void> {
    this.closed = true
    this.generation++
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer)
    const client = this.client
    this.client = undefined
    this.changed.resolve()
    if (client !== undefined) await client.close().catch(() => undefined)
    await this.fetch?.close().catch(() => undefined)
  }
}
