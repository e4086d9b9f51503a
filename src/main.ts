import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Effect, Either, Layer } from "effect"
import { parseArgs } from "node:util"
import { gatewayLayer } from "./App.js"
import { DatabaseUnreachable } from "./sql/Postgres.js"
import { decodeConfig, defaultConfigDocument, loadConfigFile, type GatewayConfig } from "./Config.js"

const usage = "usage: gateway [--config FILE] [--port N]"

const fail = (lines: ReadonlyArray<string>): never => {
  for (const line of lines) process.stderr.write(`${line}\n`)
  process.exit(2)
}

const readOptions = (): { readonly config?: string; readonly port?: number } => {
  try {
    const { values } = parseArgs({ options: { config: { type: "string" }, port: { type: "string" }, help: { type: "boolean" } }, strict: true })
    if (values.help === true) {
      process.stdout.write(`${usage}\n`)
      process.exit(0)
    }
    const port = values.port === undefined ? undefined : Number(values.port)
    if (port !== undefined && (!Number.isInteger(port) || port < 0 || port > 65535)) fail([`--port: ${values.port} is not a port number (0 picks a free port)`])
    return { ...(values.config !== undefined ? { config: values.config } : {}), ...(port !== undefined ? { port } : {}) }
  } catch (e) {
    return fail([e instanceof Error ? e.message : String(e), usage])
  }
}

const options = readOptions()
const loaded = options.config === undefined ? decodeConfig(defaultConfigDocument()) : loadConfigFile(options.config)
if (Either.isLeft(loaded)) fail(loaded.left.problems)
const decoded = (loaded as Either.Right<never, GatewayConfig>).right
const config: GatewayConfig = options.port === undefined ? decoded : { ...decoded, listen: { ...decoded.listen, port: options.port } }

const reason = (u: unknown): string => {
  let e: unknown = u
  while (e instanceof Error && e.cause !== undefined) e = e.cause
  return e instanceof Error ? e.message : String(e)
}

Layer.launch(gatewayLayer(config)).pipe(
  // the database never answered: one line naming database.url (host only), exit 2
  Effect.catchIf(
    (error): error is DatabaseUnreachable => error instanceof DatabaseUnreachable,
    (error) => Effect.sync(() => fail([error.message]))
  ),
  // a start failure (port in use, data dir not writable): one plain line on stderr, exit 1
  Effect.tapErrorCause((cause) =>
    Cause.isInterruptedOnly(cause)
      ? Effect.void
      : Effect.sync(() => process.stderr.write(`cannot serve on ${config.listen.host}:${config.listen.port}: ${reason(Cause.squash(cause))}\n`))
  ),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
