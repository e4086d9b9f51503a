import { Client, SdkErrorCode, StreamableHTTPClientTransport, type CallToolResult, type FetchLike, type Progress, type Tool } from "@modelcontextprotocol/client"
import { getDefaultEnvironment, StdioClientTransport } from "@modelcontextprotocol/client/stdio"
import { Redacted } from "effect"
import type { ToolServerConfig } from "../../Config.js"
import { mcpFetch, type McpFetch } from "./McpFetch.js"

/**
 * One live MCP session with one tool server (or, for a `perApp` server, with one app's process of
 * it): connected at start or on first need, its tool list held and refreshed on
 * `notifications/tools/list_changed`, reconnected with backoff when it drops. Plain Promise code
 * around the SDK's client; `ToolServers` gives it an Effect face.
 *
 * A dropped stdio process closes the client. Over HTTP nothing closes: a server that died or
 * restarted is seen in the requests themselves (a fetch that fails, a 404 for the session, the
 * notification stream ending), and the session is then opened anew, its tool list fetched again.
 */

/** A tool as its server lists it. */
export interface ServerTool {
  readonly name: string
  readonly description?: string
  readonly inputSchema: { readonly [key: string]: unknown }
}

/** A tool call's outcome: the server's result, or why there is none. */
export type CallOutcome = { readonly _tag: "Result"; readonly result: CallToolResult } | { readonly _tag: "Failed"; readonly reason: string; readonly timedOut: boolean }

/** A server's progress notification for a call (`progress`, optional `total` and `message`). */
export type { Progress }

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
/** a request may bring a reconnect forward, at most this often */
const EARLY_RETRY_MS = 1_000

/** The client's name in `initialize`: the gateway, never the calling app or user. */
const clientInfo = { name: "llm-gateway", version: "0.1.0" }

/**
 * Why a server is not ready, in words that hold no URL, header or server-sent text: a system error
 * code or HTTP status found along the error's causes (the SDK wraps the fetch error, which wraps
 * the socket's), or the SDK's timeout.
 */
const reasonOf = (error: unknown, stdio: boolean, timeoutMs: number): string => {
  let cause: unknown = error
  for (let depth = 0; depth < 5 && typeof cause === "object" && cause !== null; depth++) {
    const code = (cause as { code?: unknown }).code
    if (code === SdkErrorCode.RequestTimeout) return `no answer within ${timeoutMs} ms`
    if (typeof code === "string" && /^E[A-Z]+$/.test(code)) return `${stdio ? "cannot start" : "cannot connect"} (${code})`
    const status = (cause as { status?: unknown }).status ?? (cause as { statusCode?: unknown }).statusCode
    if (typeof status === "number") return `answered HTTP ${status}`
    cause = (cause as { cause?: unknown }).cause
  }
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
  /** every client not yet closed (connecting, connected, or being dropped): all closed at shutdown */
  private readonly live = new Map<Client, Promise<void> | undefined>()
  private retryMs = RETRY_MIN_MS
  private retryTimer: NodeJS.Timeout | undefined
  private closed = false
  private lastAttempt = 0
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

  private transport(generation: number) {
    const config = this.config
    if (config.url !== undefined) {
      const headers: Record<string, string> = {}
      for (const [name, value] of Object.entries(config.headers ?? {})) headers[name] = Redacted.value(value)
      // every request of the session watched: a server gone (the fetch fails) or restarted (404 to
      // a request with a session id: it no longer knows the session) means a new session, which
      // the SDK's client does not open itself
      this.fetch ??= mcpFetch()
      const send = this.fetch
      const watched: FetchLike = async (url, init) => {
        try {
          const response = await send(url, init)
          if (response.status === 404 && new Headers(init?.headers).has("mcp-session-id")) this.lost(generation)
          return response
        } catch (error) {
          if (init?.signal?.aborted !== true) this.lost(generation)
          throw error
        }
      }
      return new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers }, fetch: watched })
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
    this.lastAttempt = Date.now()
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
    this.live.set(client, undefined)
    const transport = this.transport(generation)
    client.onclose = () => {
      this.live.delete(client)
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
          if (!current()) return void this.dispose(client)
          this.client = client
          this.retryMs = RETRY_MIN_MS
          this.setState({ _tag: "Ready", tools: toTools(listed.tools) })
          // on the 2026 revision list changes come on a subscription: when it ends, the server went away
          void client.autoOpenedSubscription?.closed.then((how) => {
            if (how !== "local") this.lost(generation)
          })
        },
        (error: unknown) => {
          void this.dispose(client)
          if (!current()) return
          this.setState({ _tag: "Down", reason: reasonOf(error, this.config.url === undefined, bound) })
          this.retry()
        }
      )
  }

  /**
   * The session of this generation is gone (an HTTP server died or restarted): drop it and open a
   * new one now, or after the backoff when the last attempt was under a second ago.
   */
  private lost(generation: number) {
    const client = this.client
    if (generation !== this.generation || this.closed || client === undefined) return
    this.client = undefined
    this.generation++
    void this.dispose(client)
    if (Date.now() - this.lastAttempt >= EARLY_RETRY_MS) {
      this.setState({ _tag: "Connecting" })
      this.start()
    } else {
      this.setState({ _tag: "Down", reason: "connection lost" })
      this.retry()
    }
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
    // at most one early attempt a second: a client hammering a broken server starts no process storm
    if (this.state._tag === "Down" && this.retryTimer !== undefined && Date.now() - this.lastAttempt >= EARLY_RETRY_MS) {
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

  /**
   * Call a tool: its result, or the reason it has none (never a throw). A connection being opened
   * again (its server was seen gone since the tools were offered) is waited for, as a request waits.
   * `onProgress` gets the server's progress notifications.
   */
  async call(tool: string, args: Record<string, unknown>, signal: AbortSignal, onProgress?: (progress: Progress) => void): Promise<CallOutcome> {
    const failed = (reason: string, timedOut = false): CallOutcome => ({ _tag: "Failed", reason, timedOut })
    if (this.client === undefined) await this.ready(this.config.readyTimeoutMs)
    const client = this.client
    if (signal.aborted) return failed("the call was cancelled")
    if (client === undefined) return failed("the tool server is not connected")
    try {
      return { _tag: "Result", result: await client.callTool({ name: tool, arguments: args }, { timeout: this.config.timeoutMs, signal, ...(onProgress !== undefined ? { onprogress: onProgress } : {}) }) }
    } catch (error) {
      if (signal.aborted) return failed("the call was cancelled")
      const code = (error as { code?: unknown })?.code
      if (code === SdkErrorCode.RequestTimeout) return failed(`the tool did not answer within ${this.config.timeoutMs} ms`, true)
      // a JSON-RPC error from the server (its message is the server's text: not passed on)
      if (typeof code === "number") return failed(`the tool server refused the call (JSON-RPC error ${code})`)
      return failed("the tool server failed during the call")
    }
  }

  /** Close a client (once; a stdio one stops its process), its close event no longer heard. */
  private dispose(client: Client): Promise<void> {
    const closing = this.live.get(client)
    if (closing !== undefined) return closing
    client.onclose = undefined
    const done = client.close().catch(() => undefined)
    this.live.set(client, done)
    return done.then(() => void this.live.delete(client))
  }

  /** Close every client of this connection, one still connecting included (its process is stopped too). */
  async close(): Promise<void> {
    this.closed = true
    this.generation++
    if (this.retryTimer !== undefined) clearTimeout(this.retryTimer)
    this.client = undefined
    this.changed.resolve()
    await Promise.all([...this.live.keys()].map((client) => this.dispose(client)))
    await this.fetch?.close().catch(() => undefined)
  }
}
