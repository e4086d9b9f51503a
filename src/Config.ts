import { Context, Either, ParseResult, Redacted, Schema } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import YAML from "yaml"
import { globMatch } from "./domain/ModelId.js"

/**
 * The gateway's config file (ARCHITECTURE.md "Config file"): YAML or JSON, any string may be
 * `env:NAME`, decoded with Schema. Problems are reported one per line, each naming its path.
 */

const optionalExact = <S extends Schema.Schema.All>(s: S) => Schema.optionalWith(s, { exact: true })
const PositiveInt = Schema.Int.pipe(Schema.positive())
const NonNegativeInt = Schema.Int.pipe(Schema.nonNegative())

/** `database.statementTimeoutMs` when the config does not say: 30 s */
export const STATEMENT_TIMEOUT_MS = 30_000
/** the largest `database.statementTimeoutMs`: a day */
export const MAX_STATEMENT_TIMEOUT_MS = 86_400_000

export const VariantConfig = Schema.Struct({
  /** sent upstream as the reasoning effort */
  reasoningEffort: optionalExact(Schema.String),
  /** extra upstream request fields for this variant */
  params: optionalExact(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})
export type VariantConfig = typeof VariantConfig.Type

/** USD per million tokens; cache reads and writes default to `input` */
export const Price = Schema.Struct({
  input: Schema.NonNegative,
  output: Schema.NonNegative,
  cacheRead: optionalExact(Schema.NonNegative),
  cacheWrite: optionalExact(Schema.NonNegative)
})
export type Price = typeof Price.Type

export const ModelConfig = Schema.Struct({
  /** the name model lists show (`display_name`, `displayName`); the id when absent */
  label: optionalExact(Schema.NonEmptyTrimmedString),
  contextLimit: optionalExact(PositiveInt),
  /** this model's price (else the provider's) */
  price: optionalExact(Price),
  variants: optionalExact(Schema.Record({ key: Schema.String, value: VariantConfig })),
  /** sampling params this model refuses (wire names: temperature, top_p, top_k, seed, ...) */
  rejects: optionalExact(Schema.Array(Schema.String))
})
export type ModelConfig = typeof ModelConfig.Type

export const ProviderType = Schema.Literal("openai", "anthropic", "gemini", "mock")
export type ProviderType = typeof ProviderType.Type

/** One `anthropic-beta` flag, such as `interleaved-thinking-2025-05-14`. */
const BetaFlag = Schema.String.pipe(
  Schema.pattern(/^[a-z0-9][a-z0-9.-]*$/, { message: () => "a beta flag is lowercase letters, digits, . and - (one flag per entry)" })
)

export const ProviderConfig = Schema.Struct({
  type: ProviderType,
  baseUrl: optionalExact(Schema.String.pipe(Schema.filter((s) => /^https?:\/\/[^\s]+$/.test(s) || "must be an http(s) URL"))),
  apiKey: optionalExact(Schema.Redacted(Schema.String)),
  /** several keys instead of `apiKey`: each key is a target of its own, spread evenly and cooled down on its own */
  apiKeys: optionalExact(Schema.NonEmptyArray(Schema.Redacted(Schema.String))),
  headers: optionalExact(Schema.Record({ key: Schema.String, value: Schema.String })),
  models: optionalExact(Schema.Record({ key: Schema.String, value: ModelConfig })),
  /** the default price of this provider's models */
  price: optionalExact(Price),
  /** sampling params no model of this provider takes */
  rejects: optionalExact(Schema.Array(Schema.String)),
  /**
   * client Messages beta flags (or flag families, without the date) never forwarded to a native
   * (`anthropic`) upstream; replaces the default deny-list (every other flag is forwarded)
   */
  denyBetas: optionalExact(Schema.Array(BetaFlag)),
  /** replaced by `denyBetas`: refused with a problem saying so */
  betas: optionalExact(Schema.Unknown)
})
export type ProviderConfig = typeof ProviderConfig.Type

/** How an alias spreads its calls over its targets (`ordered`: the first that answers, as fallbacks). */
export const RoutingStrategy = Schema.Literal("ordered", "weighted", "least-busy", "lowest-latency")
export type RoutingStrategy = typeof RoutingStrategy.Type

/** One target of an alias: `<provider>/<model>`, or with a weight (default 1). */
export const AliasTarget = Schema.Union(
  Schema.String,
  Schema.Struct({ model: Schema.String, weight: optionalExact(Schema.Number.pipe(Schema.positive(), Schema.finite())) })
)

export const AliasConfig = Schema.Union(
  Schema.String,
  Schema.Struct({
    strategy: optionalExact(RoutingStrategy),
    targets: Schema.NonEmptyArray(AliasTarget),
    /** `conversation`: the turns of one conversation stay on one target while it is healthy */
    affinity: optionalExact(Schema.Literal("none", "conversation"))
  })
)
export type AliasConfig = typeof AliasConfig.Type

/** An alias's targets as `{ model, weight }`, a plain string having weight 1. */
export const aliasTargets = (value: AliasConfig): ReadonlyArray<{ readonly model: string; readonly weight: number }> =>
  typeof value === "string" ? [{ model: value, weight: 1 }] : value.targets.map((t) => (typeof t === "string" ? { model: t, weight: 1 } : { model: t.model, weight: t.weight ?? 1 }))

/** A host tool pattern: `<server>/<tool>`, globs (`*`) allowed in either part. */
const HostToolPattern = Schema.String.pipe(
  Schema.pattern(/^[^/]+\/[^/]+$/, { message: () => "a host tool is <server>/<tool> (globs allowed), e.g. search/* or files/read_text_file" })
)

export const AgentConfig = Schema.Struct({
  /** the model (alias or `<provider>/<model>`) the agent runs on */
  model: Schema.String,
  /** replaces the caller's system prompt */
  prompt: Schema.String,
  /** the app's host tools this agent grants (none: the agent grants none) */
  hostTools: optionalExact(Schema.Array(HostToolPattern))
})

export const DEFAULT_TOOL_TIMEOUT_MS = 30_000
export const DEFAULT_MAX_HOST_TOOL_ROUNDS = 8
export const DEFAULT_MAX_HOST_TOOL_RESULT_BYTES = 256 * 1024

/**
 * An MCP server the gateway calls (a "location" in the spec): Streamable HTTP at `url`, or a stdio
 * process from `command`. Headers are secrets: redacted, never logged.
 */
export const ToolServerConfig = Schema.Struct({
  url: optionalExact(Schema.String.pipe(Schema.pattern(/^https?:\/\//, { message: () => "must be an http:// or https:// URL" }))),
  headers: optionalExact(Schema.Record({ key: Schema.String, value: Schema.Redacted(Schema.String) })),
  command: optionalExact(Schema.Array(Schema.String).pipe(Schema.minItems(1))),
  /** environment of a stdio process, besides PATH and HOME */
  env: optionalExact(Schema.Record({ key: Schema.String, value: Schema.Redacted(Schema.String) })),
  /** one process per app, started in the app directory `<dataDir>/apps/<app>/` (stdio only) */
  perApp: Schema.optionalWith(Schema.Boolean, { exact: true, default: () => false }),
  /** per tool call */
  timeoutMs: Schema.optionalWith(PositiveInt, { exact: true, default: () => DEFAULT_TOOL_TIMEOUT_MS }),
  /** how long a request waits for the server's tool list before it is answered 503 not_ready */
  readyTimeoutMs: Schema.optionalWith(PositiveInt, { exact: true, default: () => 10_000 })
})
export type ToolServerConfig = typeof ToolServerConfig.Type

export const SkillConfig = Schema.Struct({
  model: Schema.String,
  /** appended to the caller's system prompt */
  content: Schema.String
})

/** A spend budget: USD or tokens per UTC calendar period (or in total) */
export const Budget = Schema.Struct({
  usd: optionalExact(Schema.Number.pipe(Schema.positive())),
  tokens: optionalExact(PositiveInt),
  per: Schema.Literal("day", "week", "month", "total")
}).pipe(Schema.filter((b) => (b.usd === undefined) !== (b.tokens === undefined) || "a budget has exactly one of usd or tokens"))
export type Budget = typeof Budget.Type

/** Traffic and spend controls of an app (config) or a runtime key (admin routes) */
export const TrafficLimits = Schema.Struct({
  /** model requests per minute (a request with n choices or candidates counts n) */
  requestsPerMinute: optionalExact(PositiveInt),
  /** input + output tokens per minute */
  tokensPerMinute: optionalExact(PositiveInt),
  /** model calls in flight at once (within the global `concurrency`) */
  concurrency: optionalExact(PositiveInt),
  budgets: optionalExact(Schema.Array(Budget))
})
export type TrafficLimits = typeof TrafficLimits.Type

export const AppConfig = Schema.Struct({
  /** the app's system policy: placed first in every request's system prompt */
  system: Schema.optionalWith(Schema.String, { exact: true }),
  maxChoices: optionalExact(PositiveInt),
  onHostedTools: optionalExact(Schema.Literal("drop", "refuse")),
  reasoningOutput: optionalExact(Schema.Boolean),
  allowedModels: optionalExact(Schema.Array(Schema.String)),
  endpoints: optionalExact(Schema.Struct({ files: optionalExact(Schema.Boolean) })),
  sessions: optionalExact(Schema.Struct({ maxAgeDays: optionalExact(NonNegativeInt) })),
  /** rate limits, concurrency and budgets of the app as a whole (every replica together) */
  limits: optionalExact(TrafficLimits),
  /** tools the gateway runs for the app: `<server>/<tool>` of `toolServers`, globs allowed */
  hostTools: optionalExact(Schema.Array(HostToolPattern)),
  /** model calls one request may make in the host tool loop */
  maxHostToolRounds: Schema.optionalWith(PositiveInt, { exact: true, default: () => DEFAULT_MAX_HOST_TOOL_ROUNDS }),
  /** a host tool result longer than this (UTF-8 bytes) is cut, with a note saying so */
  maxHostToolResultBytes: Schema.optionalWith(PositiveInt, { exact: true, default: () => DEFAULT_MAX_HOST_TOOL_RESULT_BYTES })
})
export type AppConfig = typeof AppConfig.Type

export const KeyConfig = Schema.Struct({
  key: Schema.Redacted(Schema.String.pipe(Schema.minLength(8, { message: () => "a key needs at least 8 characters" }))),
  app: Schema.String.pipe(Schema.pattern(/^[a-z0-9][a-z0-9-]*$/, { message: () => "an app name is lowercase letters, digits and -" }))
})

export const GatewayConfig = Schema.Struct({
  listen: Schema.optionalWith(
    Schema.Struct({
      host: Schema.optionalWith(Schema.String, { exact: true, default: () => "127.0.0.1" }),
      port: Schema.optionalWith(Schema.Int.pipe(Schema.between(0, 65535)), { exact: true, default: () => 4080 }),
      trustProxy: Schema.optionalWith(Schema.Boolean, { exact: true, default: () => false }),
      /** extra Host names accepted besides the listen address (for a public name in front of the gateway) */
      hosts: Schema.optionalWith(Schema.Array(Schema.String), { exact: true, default: () => [] })
    }),
    { exact: true, default: () => ({ host: "127.0.0.1", port: 4080, trustProxy: false, hosts: [] }) }
  ),
  dataDir: Schema.optionalWith(Schema.String, { exact: true, default: () => "./data" }),
  /** PostgreSQL shared by replicas; absent: SQLite in dataDir */
  database: Schema.optionalWith(
    Schema.Struct({
      url: optionalExact(Schema.Redacted(Schema.String)),
      poolSize: Schema.optionalWith(PositiveInt, { exact: true, default: () => 10 }),
      /**
       * PostgreSQL stops a statement that runs longer (`statement_timeout` on every connection);
       * a connection that heard nothing back that long and a grace more is closed by the gateway
       */
      statementTimeoutMs: Schema.optionalWith(PositiveInt.pipe(Schema.lessThanOrEqualTo(MAX_STATEMENT_TIMEOUT_MS)), {
        exact: true,
        default: () => STATEMENT_TIMEOUT_MS
      }),
      /** how long the gateway keeps trying to reach the database at start before it exits with status 2 (default 30 s) */
      connectWithinMs: optionalExact(PositiveInt.pipe(Schema.lessThanOrEqualTo(MAX_STATEMENT_TIMEOUT_MS)))
    }),
    { exact: true, default: () => ({ poolSize: 10, statementTimeoutMs: STATEMENT_TIMEOUT_MS }) }
  ),
  /** this replica's id in /gateway/status (default: host name and port) */
  replicaId: optionalExact(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200))),
  adminKey: optionalExact(Schema.Redacted(Schema.String.pipe(Schema.minLength(8, { message: () => "the admin key needs at least 8 characters" })))),
  keys: Schema.optionalWith(Schema.Array(KeyConfig), { exact: true, default: () => [] }),
  providers: Schema.optionalWith(Schema.Record({ key: Schema.String, value: ProviderConfig }), { exact: true, default: () => ({}) }),
  aliases: Schema.optionalWith(Schema.Record({ key: Schema.String, value: AliasConfig }), { exact: true, default: () => ({}) }),
  apps: Schema.optionalWith(Schema.Record({ key: Schema.String, value: AppConfig }), { exact: true, default: () => ({}) }),
  /** served as model id `agent/<name>` */
  agents: Schema.optionalWith(Schema.Record({ key: Schema.String, value: AgentConfig }), { exact: true, default: () => ({}) }),
  /** MCP servers whose tools apps run as host tools (the spec's "locations") */
  toolServers: Schema.optionalWith(Schema.Record({ key: Schema.String, value: ToolServerConfig }), { exact: true, default: () => ({}) }),
  /** served as model id `skill/<name>` */
  skills: Schema.optionalWith(Schema.Record({ key: Schema.String, value: SkillConfig }), { exact: true, default: () => ({}) }),
  limits: Schema.optionalWith(
    Schema.Struct({
      maxBodyBytes: Schema.optionalWith(PositiveInt, { exact: true, default: () => 32 * 1024 * 1024 }),
      maxBodyBytesInFlight: Schema.optionalWith(PositiveInt, { exact: true, default: () => 256 * 1024 * 1024 }),
      bodyReadTimeoutMs: Schema.optionalWith(PositiveInt, { exact: true, default: () => 30_000 }),
      bodyReadMaxMs: Schema.optionalWith(PositiveInt, { exact: true, default: () => 300_000 }),
      apps: Schema.optionalWith(
        Schema.Record({ key: Schema.String, value: Schema.Struct({ maxBodyBytes: optionalExact(PositiveInt) }) }),
        { exact: true, default: () => ({}) }
      )
    }),
    {
      exact: true,
      default: () => ({
        maxBodyBytes: 32 * 1024 * 1024,
        maxBodyBytesInFlight: 256 * 1024 * 1024,
        bodyReadTimeoutMs: 30_000,
        bodyReadMaxMs: 300_000,
        apps: {}
      })
    }
  ),
  maxTools: Schema.optionalWith(PositiveInt, { exact: true, default: () => 128 }),
  maxChoices: Schema.optionalWith(PositiveInt, { exact: true, default: () => 1 }),
  requestTimeoutMs: Schema.optionalWith(PositiveInt, { exact: true, default: () => 600_000 }),
  /**
   * the longest a started stream stays silent (spec rule 1.7: at most 10 s): an SSE comment, or a
   * newline in the Gemini JSON array, whenever nothing was written for this long
   */
  streamKeepAliveMs: Schema.optionalWith(PositiveInt.pipe(Schema.lessThanOrEqualTo(10_000)), { exact: true, default: () => 5_000 }),
  /**
   * the Responses API over WebSocket (`GET /v1/responses` with `Upgrade: websocket`): true (default)
   * or false (the upgrade is answered 426 at once), or its timers: `idleTimeoutMs` (no message
   * and no response running; default 300000) and `maxConnectionMs` (a connection's lifetime; default 3600000)
   */
  responsesWebSocket: Schema.optionalWith(
    Schema.Union(Schema.Boolean, Schema.Struct({ idleTimeoutMs: optionalExact(PositiveInt), maxConnectionMs: optionalExact(PositiveInt) })),
    { exact: true, default: () => true }
  ),
  concurrency: Schema.optionalWith(PositiveInt, { exact: true, default: () => 256 }),
  usage: Schema.optionalWith(
    Schema.Struct({
      enabled: Schema.optionalWith(Schema.Boolean, { exact: true, default: () => true }),
      /**
       * days of raw usage rows kept: older whole UTC days are rolled up per hour, app, key, user
       * and model (UsageRetention.ts) and their rows deleted; absent: raw rows are kept forever
       */
      retentionDays: optionalExact(PositiveInt)
    }),
    { exact: true, default: () => ({ enabled: true }) }
  ),
  sessions: Schema.optionalWith(Schema.Struct({ maxAgeDays: optionalExact(NonNegativeInt) }), { exact: true, default: () => ({}) }),
  dropUnsupportedParams: Schema.optionalWith(Schema.Boolean, { exact: true, default: () => true }),
  reasoningOutput: Schema.optionalWith(Schema.Boolean, { exact: true, default: () => false }),
  /** files named by URL in requests (Responses `input_file.file_url`) */
  remoteFiles: Schema.optionalWith(
    Schema.Struct({
      enabled: Schema.optionalWith(Schema.Boolean, { exact: true, default: () => true }),
      /** allow loopback and private addresses (off: SSRF protection) */
      allowPrivateNetworks: Schema.optionalWith(Schema.Boolean, { exact: true, default: () => false }),
      maxBytes: Schema.optionalWith(PositiveInt, { exact: true, default: () => 32 * 1024 * 1024 }),
      timeoutMs: Schema.optionalWith(PositiveInt, { exact: true, default: () => 10_000 })
    }),
    { exact: true, default: () => ({ enabled: true, allowPrivateNetworks: false, maxBytes: 32 * 1024 * 1024, timeoutMs: 10_000 }) }
  ),
  /** write one JSON log line per request to stdout */
  accessLog: Schema.optionalWith(Schema.Boolean, { exact: true, default: () => true }),
  telemetry: optionalExact(Schema.Struct({ otlpEndpoint: optionalExact(Schema.String) }))
})
export type GatewayConfig = typeof GatewayConfig.Type
export type GatewayConfigInput = typeof GatewayConfig.Encoded

/** A config that could not be used: one message per problem, each naming its path. */
export class ConfigProblems {
  readonly _tag = "ConfigProblems"
  constructor(readonly problems: ReadonlyArray<string>) {}
  toString(): string {
    return this.problems.join("\n")
  }
}

/** Replace every `env:NAME` string with the variable's value, collecting the missing ones. */
export const resolveEnv = (
  value: unknown,
  env: Record<string, string | undefined>,
  at: string,
  problems: Array<string>
): unknown => {
  if (typeof value === "string") {
    const match = /^env:([A-Za-z_][A-Za-z0-9_]*)$/.exec(value)
    if (match === null) return value
    const found = env[match[1]]
    if (found === undefined || found === "") {
      problems.push(`${at || "(root)"}: environment variable ${match[1]} is not set`)
      return value
    }
    return found
  }
  if (Array.isArray(value)) return value.map((v, i) => resolveEnv(v, env, `${at}.${i}`, problems))
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) out[k] = resolveEnv(v, env, at ? `${at}.${k}` : k, problems)
    return out
  }
  return value
}

const formatIssues = (error: ParseResult.ParseError): Array<string> => {
  // a union (Literal("a", "b")) reports one issue per member: one line per path instead
  const byPath = new Map<string, Array<string>>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const where = issue.path.length === 0 ? "(root)" : issue.path.map(String).join(".")
    const message = issue._tag === "Missing" ? "is required" : issue.message
    byPath.set(where, [...(byPath.get(where) ?? []), message])
  }
  const paths = [...byPath.keys()]
  // a value one member of a union took the shape of (an alias `{ targets }`, an object target)
  // has its problems inside; the other members' mismatch at the value itself ("Expected string,
  // actual {...}") would only mislead: it is left out
  const mismatchOnly = (where: string, messages: ReadonlyArray<string>) =>
    messages.every((m) => /^Expected .+, actual .+$/s.test(m)) && paths.some((p) => p.startsWith(`${where}.`))
  return [...byPath].filter(([where, messages]) => where === "(root)" || !mismatchOnly(where, messages)).map(([where, messages]) => {
    const expected = messages.map((m) => /^Expected (.+), actual (.+)$/.exec(m))
    if (messages.length > 1 && expected.every((m) => m !== null)) {
      return `${where}: Expected ${expected.map((m) => m![1]).join(" | ")}, actual ${expected[0]![2]}`
    }
    return `${where}: ${messages.join("; ")}`
  })
}

/** Checks across fields that a schema cannot express. */
const crossCheck = (config: GatewayConfig): Array<string> => {
  const problems: Array<string> = []
  for (const [name, provider] of Object.entries(config.providers)) {
    if (name.includes("/") || name.includes("#")) problems.push(`providers.${name}: a provider name cannot contain / or #`)
    if (provider.type !== "mock" && provider.baseUrl === undefined) problems.push(`providers.${name}.baseUrl: is required for type ${provider.type}`)
    if (provider.apiKey !== undefined && provider.apiKeys !== undefined) problems.push(`providers.${name}.apiKeys: give apiKey or apiKeys, not both`)
    if (provider.betas !== undefined) {
      problems.push(`providers.${name}.betas: replaced by denyBetas — every client beta flag is now forwarded except a deny-list (see the README); list the flags to hold back in denyBetas`)
    }
  }
  const targetOk = (target: string) => {
    const slash = target.indexOf("/")
    return slash > 0 && config.providers[target.slice(0, slash)] !== undefined
  }
  for (const [alias, value] of Object.entries(config.aliases)) {
    aliasTargets(value).forEach(({ model: target }, i) => {
      const where = typeof value === "string" ? `aliases.${alias}` : typeof value.targets[i] === "string" ? `aliases.${alias}.targets.${i}` : `aliases.${alias}.targets.${i}.model`
      if (!targetOk(target)) problems.push(`${where}: ${JSON.stringify(target)} does not name a configured provider as <provider>/<model>`)
      if (target.includes("*") && !alias.includes("*")) problems.push(`${where}: only a glob alias can have * in its target`)
    })
    if ((alias.match(/\*/g) ?? []).length > 1) problems.push(`aliases.${alias}: a glob alias may hold one *`)
  }
  const keys = new Set<string>()
  config.keys.forEach((entry, i) => {
    const k = Redacted.value(entry.key)
    if (keys.has(k)) problems.push(`keys.${i}.key: the same key is configured twice`)
    keys.add(k)
    if (entry.app === "default") problems.push(`keys.${i}.app: "default" is reserved for keyless loopback use`)
  })
  for (const name of Object.keys(config.limits.apps)) {
    if (!config.keys.some((k) => k.app === name)) problems.push(`limits.apps.${name}: no key belongs to app ${name}`)
  }
  for (const [name, server] of Object.entries(config.toolServers)) {
    const where = `toolServers.${name}`
    if (!/^[A-Za-z0-9_-]+$/.test(name)) problems.push(`${where}: a tool server name is letters, digits, _ and -`)
    else if (name.includes("__")) problems.push(`${where}: a tool server name cannot contain __ (it separates server and tool in the names the model sees)`)
    if ((server.url === undefined) === (server.command === undefined)) problems.push(`${where}: give url (Streamable HTTP) or command (stdio), one of them`)
    if (server.url !== undefined && server.perApp) problems.push(`${where}.perApp: only a stdio server (command) runs per app`)
    if (server.url !== undefined && server.env !== undefined) problems.push(`${where}.env: only a stdio server (command) takes env`)
    if (server.command !== undefined && server.headers !== undefined) problems.push(`${where}.headers: only an HTTP server (url) takes headers`)
  }
  const serverOk = (pattern: string) => {
    const server = pattern.slice(0, pattern.indexOf("/"))
    return Object.keys(config.toolServers).some((name) => globMatch(server, name))
  }
  for (const [app, settings] of Object.entries(config.apps)) {
    settings.hostTools?.forEach((pattern, i) => {
      if (!serverOk(pattern)) problems.push(`apps.${app}.hostTools.${i}: ${JSON.stringify(pattern)} names no configured tool server`)
    })
  }
  for (const [agent, settings] of Object.entries(config.agents)) {
    settings.hostTools?.forEach((pattern, i) => {
      if (!serverOk(pattern)) problems.push(`agents.${agent}.hostTools.${i}: ${JSON.stringify(pattern)} names no configured tool server`)
    })
  }
  if (config.database.url !== undefined && !/^postgres(ql)?:\/\//.test(Redacted.value(config.database.url))) {
    problems.push("database.url: must be a postgres:// or postgresql:// URL")
  }
  if (config.limits.bodyReadMaxMs < config.limits.bodyReadTimeoutMs) {
    problems.push("limits.bodyReadMaxMs: must be at least limits.bodyReadTimeoutMs")
  }
  return problems
}

/** Decode a parsed config document (after `env:` resolution). */
export const decodeConfig = (
  document: unknown,
  env: Record<string, string | undefined> = process.env
): Either.Either<GatewayConfig, ConfigProblems> => {
  const problems: Array<string> = []
  const resolved = resolveEnv(document ?? {}, env, "", problems)
  const decoded = Schema.decodeUnknownEither(GatewayConfig, { errors: "all", onExcessProperty: "error" })(resolved)
  if (Either.isLeft(decoded) || problems.length > 0) {
    const envPaths = problems.map((p) => p.slice(0, p.indexOf(": ")))
    const schema = Either.isLeft(decoded) ? formatIssues(decoded.left).filter((l) => !envPaths.includes(l.slice(0, l.indexOf(": ")))) : []
    return Either.left(new ConfigProblems([...problems, ...schema]))
  }
  const cross = crossCheck(decoded.right)
  return cross.length > 0 ? Either.left(new ConfigProblems(cross)) : Either.right(decoded.right)
}

/** Parse a config file's text by its extension. */
export const parseConfigText = (file: string, text: string): Either.Either<unknown, ConfigProblems> => {
  const ext = path.extname(file).toLowerCase()
  try {
    if (ext === ".json") return Either.right(JSON.parse(text))
    if (ext === ".yaml" || ext === ".yml") {
      const doc = YAML.parseDocument(text)
      if (doc.errors.length > 0) return Either.left(new ConfigProblems(doc.errors.map((e) => `${file}: ${e.message.split("\n")[0]}`)))
      return Either.right(doc.toJS())
    }
  } catch (e) {
    return Either.left(new ConfigProblems([`${file}: not valid JSON (${e instanceof Error ? e.message : String(e)})`]))
  }
  return Either.left(new ConfigProblems([`${file}: a config file ends in .yaml, .yml or .json`]))
}

export const loadConfigFile = (file: string, env: Record<string, string | undefined> = process.env): Either.Either<GatewayConfig, ConfigProblems> => {
  let text: string
  try {
    text = fs.readFileSync(file, "utf8")
  } catch (e) {
    return Either.left(new ConfigProblems([`${file}: cannot be read (${(e as NodeJS.ErrnoException).code ?? "error"})`]))
  }
  return Either.flatMap(parseConfigText(file, text), (doc) => decodeConfig(doc, env))
}

/**
 * The embedded default: 127.0.0.1:4080, data in ./data, the `mock` provider always, plus an
 * `openai`, `anthropic` or `gemini` provider for each API key found in the environment.
 */
export const defaultConfigDocument = (env: Record<string, string | undefined> = process.env): Record<string, unknown> => {
  const providers: Record<string, unknown> = { mock: { type: "mock", models: { echo: {} } } }
  if (env.OPENAI_API_KEY) providers.openai = { type: "openai", baseUrl: env.OPENAI_BASE_URL ?? "https://api.openai.com/v1", apiKey: "env:OPENAI_API_KEY" }
  if (env.ANTHROPIC_API_KEY) providers.anthropic = { type: "anthropic", baseUrl: env.ANTHROPIC_BASE_URL ?? "https://api.anthropic.com", apiKey: "env:ANTHROPIC_API_KEY" }
  if (env.GEMINI_API_KEY) providers.gemini = { type: "gemini", baseUrl: env.GEMINI_BASE_URL ?? "https://generativelanguage.googleapis.com", apiKey: "env:GEMINI_API_KEY" }
  return { providers, aliases: { default: "mock/echo" } }
}

/** The decoded config, provided to every service that reads options. */
export class Settings extends Context.Tag("gateway/Settings")<Settings, GatewayConfig>() {}
