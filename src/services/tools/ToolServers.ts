import { Context, Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { Settings, type ToolServerConfig } from "../../Config.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { Connection, type CallOutcome, type Progress, type ServerTool } from "./Connection.js"

/**
 * The MCP servers the operator configured (`toolServers`), connected by this replica itself: the
 * shared ones at start, a `perApp` one per app on that app's first request that needs it, in the
 * app directory `<dataDir>/apps/<app>/`. Nothing a client sends names a server's URL or command.
 */

/** One connection as status and readiness show it (never its URL, command or headers). */
export interface ServerStatus {
  readonly server: string
  /** the app of a per-app process */
  readonly app?: string
  readonly state: "connecting" | "ready" | "down"
  readonly tools: number
  /** why it is down */
  readonly reason?: string
}

export type { CallOutcome, Progress }

export class ToolServers extends Context.Tag("gateway/ToolServers")<
  ToolServers,
  {
    /** whether any server is configured */
    readonly configured: boolean
    /** the app directory, created if missing */
    readonly appDirectory: (app: string) => Effect.Effect<string, GatewayError>
    /**
     * The server's tools for this app (a per-app server: the app's own process, started now if it
     * is not yet), waiting up to the server's `readyTimeoutMs`; 503 `not_ready` naming the server
     * when it has none by then.
     */
    readonly tools: (server: string, app: string) => Effect.Effect<ReadonlyArray<ServerTool>, GatewayError>
    /**
     * Call a tool on the server (the app's process for a per-app server); interruptible, never fails.
     * `onProgress` gets the server's progress notifications for this call.
     */
    readonly call: (server: string, app: string, tool: string, args: Record<string, unknown>, onProgress?: (progress: Progress) => void) => Effect.Effect<CallOutcome>
    readonly status: () => ReadonlyArray<ServerStatus>
    /** Called whenever a connection's tool list changes, or it comes up or goes down. Returns the unsubscribe. */
    readonly onChange: (listener: () => void) => () => void
  }
>() {
  static readonly layer = Layer.scoped(
    ToolServers,
    Effect.gen(function* () {
      const config = yield* Settings
      const servers = config.toolServers
      const listeners = new Set<() => void>()
      const changed = () => {
        for (const listener of listeners) listener()
      }
      /** shared connections by server; per-app ones by `server\0app` */
      const connections = new Map<string, Connection>()
      const appDirs = new Set<string>()

      const appDirectoryPath = (app: string) => path.resolve(config.dataDir, "apps", app)
      const appDirectory = (app: string) =>
        Effect.suspend(() => {
          const dir = appDirectoryPath(app)
          if (appDirs.has(app)) return Effect.succeed(dir)
          return Effect.try({
            try: () => {
              fs.mkdirSync(dir, { recursive: true })
              appDirs.add(app)
              return dir
            },
            catch: () => Errors.unavailable("not_ready", `not ready: the app directory of ${app} cannot be created`, { retryAfter: 5 })
          })
        })

      const open = (key: string, label: string, server: ToolServerConfig, cwd: string | undefined): Connection => {
        const connection = new Connection(label, server, cwd, changed)
        connections.set(key, connection)
        connection.start()
        return connection
      }

      // the shared servers connect at start, in the background: a slow one holds up nothing
      for (const [name, server] of Object.entries(servers)) if (!server.perApp) open(name, name, server, undefined)

      yield* Effect.addFinalizer(() =>
        Effect.promise(() => Promise.all([...connections.values()].map((c) => c.close()))).pipe(Effect.timeout("10 seconds"), Effect.ignore)
      )

      const connectionFor = (name: string, app: string): Effect.Effect<Connection, GatewayError> => {
        const server = servers[name]
        if (server === undefined) return Effect.fail(Errors.internal("internal", `no tool server named ${name}`))
        if (!server.perApp) return Effect.succeed(connections.get(name)!)
        const key = `${name}\u0000${app}`
        const existing = connections.get(key)
        if (existing !== undefined) return Effect.succeed(existing)
        return Effect.map(appDirectory(app), (dir) => connections.get(key) ?? open(key, `${name}@${app}`, server, dir))
      }

      const notReady = (name: string, connection: Connection) => {
        const state = connection.current()
        const why = state._tag === "Down" ? state.reason : "still connecting"
        return Errors.unavailable("not_ready", `not ready: tool server ${name} has no tool list (${why})`, { retryAfter: 5 })
      }

      const tools = (name: string, app: string) =>
        Effect.flatMap(connectionFor(name, app), (connection) => {
          const state = connection.current()
          if (state._tag === "Ready") return Effect.succeed(state.tools)
          return Effect.flatMap(
            Effect.promise(() => connection.ready(servers[name].readyTimeoutMs)),
            (listed) => (listed === undefined ? Effect.fail(notReady(name, connection)) : Effect.succeed(listed))
          )
        })

      const call = (name: string, app: string, tool: string, args: Record<string, unknown>, onProgress?: (progress: Progress) => void): Effect.Effect<CallOutcome> =>
        Effect.matchEffect(connectionFor(name, app), {
          onFailure: () => Effect.succeed<CallOutcome>({ _tag: "Failed", reason: "the tool server is not configured", timedOut: false }),
          onSuccess: (connection) =>
            Effect.promise((signal) => connection.call(tool, args, signal, onProgress))
        })

      const status = (): ReadonlyArray<ServerStatus> => {
        const all: Array<ServerStatus> = []
        for (const [key, connection] of connections) {
          const [server, app] = key.split("\u0000")
          const state = connection.current()
          all.push({
            server,
            ...(app !== undefined ? { app } : {}),
            state: state._tag === "Ready" ? "ready" : state._tag === "Down" ? "down" : "connecting",
            tools: state._tag === "Ready" ? state.tools.length : 0,
            ...(state._tag === "Down" ? { reason: state.reason } : {})
          })
        }
        return all
      }

      const onChange = (listener: () => void) => {
        listeners.add(listener)
        return () => void listeners.delete(listener)
      }

      return ToolServers.of({ configured: Object.keys(servers).length > 0, appDirectory, tools, call, status, onChange })
    })
  )
}
