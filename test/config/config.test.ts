import { Effect, Either, Redacted } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { aliasTargets, decodeConfig, defaultConfigDocument, loadConfigFile, parseConfigText, type ConfigProblems, type GatewayConfig } from "../../src/Config.js"
import { targetName } from "../../src/providers/Provider.js"
import { Catalog } from "../../src/services/routing/Catalog.js"

/** The decoded config, or a thrown error listing the problems. */
const ok = (result: Either.Either<GatewayConfig, ConfigProblems>): GatewayConfig => {
  if (Either.isLeft(result)) throw new Error(`expected a valid config, got:\n${result.left.problems.join("\n")}`)
  return result.right
}

/** The problems, or a thrown error when the config was accepted. */
const problemsOf = <A>(result: Either.Either<A, ConfigProblems>): ReadonlyArray<string> => {
  if (Either.isRight(result)) throw new Error(`expected config problems, got a value: ${JSON.stringify(result.right)}`)
  return result.left.problems
}

/** Every problem line names its path first: `a.b.c: message`. */
const pathOf = (line: string): string => line.slice(0, line.indexOf(": "))

/** Assert that each expected path has a problem and nothing else was reported (one problem, one line). */
const expectExactlyPaths = (problems: ReadonlyArray<string>, paths: ReadonlyArray<string>) => {
  for (const line of problems) expect(line, `problem line ${JSON.stringify(line)}`).toMatch(/^[^\s:]+: \S/)
  expect([...problems.map(pathOf)].sort(), problems.join("\n")).toEqual([...paths].sort())
}

const fullYaml = `
listen: { host: 127.0.0.1, port: 4080, trustProxy: false }
dataDir: ./data
adminKey: env:GATEWAY_ADMIN_KEY
keys:                                   # configured keys; one app may have several
  - { key: env:TEAM_A_KEY, app: team-a }
  - { key: literal-key-team-a-2, app: team-a }
providers:
  openai:
    type: openai
    baseUrl: https://api.openai.com/v1
    apiKey: env:OPENAI_API_KEY
    headers: { x-extra: "1" }
    models:
      gpt-5-mini:
        contextLimit: 400000
        variants: { low: { reasoningEffort: low }, high: { reasoningEffort: high } }
        rejects: [top_k]
  router:
    type: openai
    baseUrl: https://openrouter.ai/api/v1
    apiKey: env:ROUTER_KEY
  mock:
    type: mock
aliases:
  fast: openai/gpt-5-mini
  smart: { targets: [router/anthropic/claude-sonnet-4-5, openai/gpt-5] }
  "claude-*": router/anthropic/*
apps:
  team-a:
    maxChoices: 4
    onHostedTools: drop
    reasoningOutput: false
    allowedModels: ["openai/*", fast]
    endpoints: { files: true }
    sessions: { maxAgeDays: 30 }
limits:
  maxBodyBytes: 33554432
  maxBodyBytesInFlight: 268435456
  bodyReadTimeoutMs: 30000
  bodyReadMaxMs: 300000
  apps: { team-a: { maxBodyBytes: 8388608 } }
maxTools: 128
maxChoices: 1
requestTimeoutMs: 600000
concurrency: 256
usage: { enabled: true }
sessions: { maxAgeDays: 30 }
dropUnsupportedParams: true
reasoningOutput: false
telemetry: { otlpEndpoint: http://127.0.0.1:4318 }
`

const secrets = {
  GATEWAY_ADMIN_KEY: "admin-secret-0123456789",
  TEAM_A_KEY: "team-a-secret-0123456789",
  OPENAI_API_KEY: "sk-openai-secret-0123456789",
  ROUTER_KEY: "sk-or-secret-0123456789"
}

const parseYaml = (text: string, file = "gateway.yaml"): unknown => {
  const parsed = parseConfigText(file, text)
  if (Either.isLeft(parsed)) throw new Error(parsed.left.problems.join("\n"))
  return parsed.right
}

describe("decodeConfig: a full config", () => {
  it("decodes the ARCHITECTURE.md example (openai and mock providers)", () => {
    const config = ok(decodeConfig(parseYaml(fullYaml), secrets))
    expect(config.listen).toEqual({ host: "127.0.0.1", port: 4080, trustProxy: false, hosts: [] })
    expect(config.dataDir).toBe("./data")
    expect(Redacted.value(config.adminKey!)).toBe(secrets.GATEWAY_ADMIN_KEY)
    expect(config.keys.map((k) => [Redacted.value(k.key), k.app])).toEqual([
      [secrets.TEAM_A_KEY, "team-a"],
      ["literal-key-team-a-2", "team-a"]
    ])
    expect(Object.keys(config.providers).sort()).toEqual(["mock", "openai", "router"])
    const openai = config.providers.openai
    expect(openai.type).toBe("openai")
    expect(openai.baseUrl).toBe("https://api.openai.com/v1")
    expect(Redacted.value(openai.apiKey!)).toBe(secrets.OPENAI_API_KEY)
    expect(openai.headers).toEqual({ "x-extra": "1" })
    expect(openai.models?.["gpt-5-mini"]).toEqual({
      contextLimit: 400000,
      variants: { low: { reasoningEffort: "low" }, high: { reasoningEffort: "high" } },
      rejects: ["top_k"]
    })
    expect(config.aliases).toEqual({
      fast: "openai/gpt-5-mini",
      smart: { targets: ["router/anthropic/claude-sonnet-4-5", "openai/gpt-5"] },
      "claude-*": "router/anthropic/*"
    })
    expect(config.apps["team-a"]).toEqual({
      maxChoices: 4,
      onHostedTools: "drop",
      reasoningOutput: false,
      allowedModels: ["openai/*", "fast"],
      endpoints: { files: true },
      sessions: { maxAgeDays: 30 },
      maxHostToolRounds: 8,
      maxHostToolResultBytes: 262144
    })
    expect(config.limits).toEqual({
      maxBodyBytes: 33554432,
      maxBodyBytesInFlight: 268435456,
      bodyReadTimeoutMs: 30000,
      bodyReadMaxMs: 300000,
      apps: { "team-a": { maxBodyBytes: 8388608 } }
    })
    expect(config.telemetry).toEqual({ otlpEndpoint: "http://127.0.0.1:4318" })
    expect(config.accessLog).toBe(true)
  })

  it("fills in every default for an empty document (and for null / undefined)", () => {
    const expected = {
      listen: { host: "127.0.0.1", port: 4080, trustProxy: false, hosts: [] },
      dataDir: "./data",
      database: { poolSize: 10, statementTimeoutMs: 30000 },
      keys: [],
      providers: {},
      aliases: {},
      apps: {},
      limits: {
        maxBodyBytes: 32 * 1024 * 1024,
        maxBodyBytesInFlight: 256 * 1024 * 1024,
        bodyReadTimeoutMs: 30_000,
        bodyReadMaxMs: 300_000,
        apps: {}
      },
      maxTools: 128,
      maxChoices: 1,
      requestTimeoutMs: 600_000,
      streamKeepAliveMs: 5_000,
      responsesWebSocket: true,
      concurrency: 256,
      usage: { enabled: true },
      sessions: {},
      dropUnsupportedParams: true,
      reasoningOutput: false,
      remoteFiles: { enabled: true, allowPrivateNetworks: false, maxBytes: 33554432, timeoutMs: 10000 },
      agents: {},
      toolServers: {},
      skills: {},
      accessLog: true
    }
    expect(ok(decodeConfig({}, {}))).toEqual(expected)
    expect(ok(decodeConfig(null, {}))).toEqual(expected)
    expect(ok(decodeConfig(undefined, {}))).toEqual(expected)
    // an empty YAML file is a valid (all-default) config
    expect(ok(decodeConfig(parseYaml(""), {}))).toEqual(expected)
  })

  it("fills in defaults inside a partly given section", () => {
    const config = ok(decodeConfig({ listen: { port: 0 }, limits: { maxBodyBytes: 1024 }, usage: {} }, {}))
    expect(config.listen).toEqual({ host: "127.0.0.1", port: 0, trustProxy: false, hosts: [] })
    expect(config.limits).toEqual({
      maxBodyBytes: 1024,
      maxBodyBytesInFlight: 256 * 1024 * 1024,
      bodyReadTimeoutMs: 30_000,
      bodyReadMaxMs: 300_000,
      apps: {}
    })
    expect(config.usage).toEqual({ enabled: true })
    expect(config.maxTools).toBe(128)
    expect(config.concurrency).toBe(256)
  })
})

describe("decodeConfig: env:NAME", () => {
  it("resolves env: strings anywhere: nested objects, arrays, record keys' values", () => {
    const env = { HOST: "127.0.0.2", DIR: "/var/lib/gw", KEY1: "k1-0123456789", APP: "team-b", URL: "http://10.0.0.1:8000/v1", H: "hv", M: "openai/gpt-x", P: "top_p" }
    const config = ok(
      decodeConfig(
        {
          listen: { host: "env:HOST" },
          dataDir: "env:DIR",
          keys: [{ key: "env:KEY1", app: "env:APP" }],
          providers: { openai: { type: "openai", baseUrl: "env:URL", headers: { "x-h": "env:H" }, models: { m: { rejects: ["top_k", "env:P"] } } } },
          aliases: { a: "env:M", b: { targets: ["openai/y", "env:M"] } },
          apps: { "team-b": { allowedModels: ["env:M"] } }
        },
        env
      )
    )
    expect(config.listen.host).toBe("127.0.0.2")
    expect(config.dataDir).toBe("/var/lib/gw")
    expect(Redacted.value(config.keys[0].key)).toBe("k1-0123456789")
    expect(config.keys[0].app).toBe("team-b")
    expect(config.providers.openai.baseUrl).toBe("http://10.0.0.1:8000/v1")
    expect(config.providers.openai.headers).toEqual({ "x-h": "hv" })
    expect(config.providers.openai.models?.m.rejects).toEqual(["top_k", "top_p"])
    expect(config.aliases).toEqual({ a: "openai/gpt-x", b: { targets: ["openai/y", "openai/gpt-x"] } })
    expect(config.apps["team-b"].allowedModels).toEqual(["openai/gpt-x"])
  })

  it("leaves strings that only look similar alone", () => {
    const config = ok(
      decodeConfig({ providers: { mock: { type: "mock", headers: { a: "env:", b: "xenv:A", c: "env:A B", d: "ENV:A" } } } }, { A: "resolved" })
    )
    expect(config.providers.mock.headers).toEqual({ a: "env:", b: "xenv:A", c: "env:A B", d: "ENV:A" })
  })

  it("a missing variable is a problem naming its path", () => {
    const problems = problemsOf(
      decodeConfig({ providers: { openai: { type: "openai", baseUrl: "https://api.openai.com/v1", apiKey: "env:X" } } }, {})
    )
    expect(problems).toEqual(["providers.openai.apiKey: environment variable X is not set"])
  })

  it("an empty variable counts as missing", () => {
    expect(problemsOf(decodeConfig({ adminKey: "env:ADMIN" }, { ADMIN: "" }))).toEqual(["adminKey: environment variable ADMIN is not set"])
  })

  it("every missing variable is reported, with array indices in the path", () => {
    const problems = problemsOf(
      decodeConfig(
        {
          adminKey: "env:ADMIN",
          keys: [{ key: "literal-key-000", app: "a" }, { key: "env:K2", app: "b" }],
          aliases: { s: { targets: ["mock/a", "env:T1"] } }
        },
        {}
      )
    )
    expect([...problems].sort()).toEqual(
      [
        "adminKey: environment variable ADMIN is not set",
        "keys.1.key: environment variable K2 is not set",
        "aliases.s.targets.1: environment variable T1 is not set"
      ].sort()
    )
  })

  it("a missing variable and a schema problem elsewhere are both reported", () => {
    const problems = problemsOf(
      decodeConfig({ providers: { openai: { type: "openai", baseUrl: "https://api.openai.com/v1", apiKey: "env:X" } }, maxTools: 0 }, {})
    )
    expect(problems).toContain("providers.openai.apiKey: environment variable X is not set")
    expect(problems.map(pathOf)).toContain("maxTools")
  })
})

describe("decodeConfig: problems", () => {
  it("several schema problems are all reported, one line each, each naming its path", () => {
    const problems = problemsOf(
      decodeConfig(
        {
          providers: { p: { type: "openai", baseUrl: "not a url" } },
          limits: { maxBodyBytes: -1 },
          bogus: 1
        },
        {}
      )
    )
    expectExactlyPaths(problems, ["providers.p.baseUrl", "limits.maxBodyBytes", "bogus"])
    expect(problems.find((l) => l.startsWith("providers.p.baseUrl:"))).toBe("providers.p.baseUrl: must be an http(s) URL")
    expect(problems.find((l) => l.startsWith("bogus:"))).toMatch(/unexpected/i)
  })

  it("reports each bad field of one section separately", () => {
    const problems = problemsOf(
      decodeConfig(
        {
          listen: { port: 70000, trustProxy: "yes" },
          maxTools: 0,
          concurrency: 1.5,
          usage: { enabled: "no" },
          apps: { a: { onHostedTools: "ignore" } },
          providers: { q: { type: "carrier-pigeon", baseUrl: "https://x" } }
        },
        {}
      )
    )
    expectExactlyPaths(problems, ["listen.port", "listen.trustProxy", "maxTools", "concurrency", "usage.enabled", "apps.a.onHostedTools", "providers.q.type"])
  })

  it("unknown keys are named wherever they are", () => {
    const problems = problemsOf(decodeConfig({ listen: { prot: 1 }, providers: { m: { type: "mock", apikey: "x" } } }, {}))
    expectExactlyPaths(problems, ["listen.prot", "providers.m.apikey"])
  })

  it("a required field that is absent is named", () => {
    const problems = problemsOf(decodeConfig({ providers: { m: {} }, keys: [{ app: "a" }] }, {}))
    expectExactlyPaths(problems, ["providers.m.type", "keys.0.key"])
    expect(problems.find((l) => l.startsWith("providers.m.type:"))).toBe("providers.m.type: is required")
  })

  it("an openai provider needs a baseUrl", () => {
    expect(problemsOf(decodeConfig({ providers: { o: { type: "openai" } } }, {}))).toEqual(["providers.o.baseUrl: is required for type openai"])
  })

  it("an alias target naming an unknown provider, a provider name with /, a duplicate key and the reserved app are all reported", () => {
    const problems = problemsOf(
      decodeConfig(
        {
          providers: { mock: { type: "mock" }, "a/b": { type: "mock" } },
          aliases: { fast: "nowhere/gpt-x", smart: { targets: ["mock/echo", "ghost/m"] }, bare: "echo" },
          keys: [
            { key: "same-key-0123", app: "team-a" },
            { key: "same-key-0123", app: "team-b" },
            { key: "other-key-0123", app: "default" }
          ]
        },
        {}
      )
    )
    expectExactlyPaths(problems, ["providers.a/b", "aliases.fast", "aliases.smart.targets.1", "aliases.bare", "keys.1.key", "keys.2.app"])
    expect(problems.find((l) => l.startsWith("aliases.fast:"))).toContain('"nowhere/gpt-x"')
    expect(problems.find((l) => l.startsWith("keys.2.app:"))).toContain("reserved")
    // the duplicated key itself is never echoed
    expect(problems.join("\n")).not.toContain("same-key-0123")
  })

  it("limits for an app without a key and bodyReadMaxMs below bodyReadTimeoutMs are reported", () => {
    const problems = problemsOf(decodeConfig({ limits: { bodyReadTimeoutMs: 1000, bodyReadMaxMs: 10, apps: { ghost: { maxBodyBytes: 1 } } } }, {}))
    expectExactlyPaths(problems, ["limits.apps.ghost", "limits.bodyReadMaxMs"])
  })

  it("a bad key or app name is reported without echoing the key", () => {
    const problems = problemsOf(decodeConfig({ keys: [{ key: "short", app: "Team A" }] }, {}))
    expectExactlyPaths(problems, ["keys.0.key", "keys.0.app"])
    expect(problems.join("\n")).not.toContain("short\"")
  })

  it("database: a URL from env:, a default pool of 10; a URL that is not postgres:// is reported without echoing it", () => {
    const url = "postgres://gw:s3cret-pass@db.internal:5432/gateway"
    const config = ok(decodeConfig({ database: { url: "env:DATABASE_URL" }, replicaId: "gw-1" }, { DATABASE_URL: url }))
    expect(config.database.poolSize).toBe(10)
    expect(Redacted.value(config.database.url!)).toBe(url)
    expect(String(config.database.url)).not.toContain("s3cret")
    expect(config.replicaId).toBe("gw-1")
    const problems = problemsOf(decodeConfig({ database: { url: "mysql://u:hunter2@h/db", poolSize: 0 }, replicaId: "" }, {}))
    expectExactlyPaths(problems, ["database.poolSize", "replicaId"])
    const scheme = problemsOf(decodeConfig({ database: { url: "mysql://u:hunter2@h/db" } }, {}))
    expect(scheme).toEqual(["database.url: must be a postgres:// or postgresql:// URL"])
    expect([...problems, ...scheme].join("\n")).not.toContain("hunter2")
  })

  it("prices: per provider and per model, USD per million tokens, never negative", () => {
    const config = ok(decodeConfig({ providers: { p: { type: "mock", price: { input: 1.25, output: 10 }, models: { m: { price: { input: 0.25, output: 2, cacheRead: 0.025, cacheWrite: 0.3125 } } } } } }, {}))
    expect(config.providers.p.price).toEqual({ input: 1.25, output: 10 })
    expect(config.providers.p.models?.m.price).toEqual({ input: 0.25, output: 2, cacheRead: 0.025, cacheWrite: 0.3125 })
    const problems = problemsOf(decodeConfig({ providers: { p: { type: "mock", price: { input: -1 }, models: { m: { price: { input: 1, output: 1, cacheRead: -0.5 } } } } } }, {}))
    expectExactlyPaths(problems, ["providers.p.price.input", "providers.p.price.output", "providers.p.models.m.price.cacheRead"])
  })

  it("usage.retentionDays: a positive whole number of days, absent by default (raw rows kept forever)", () => {
    expect(ok(decodeConfig({ usage: { retentionDays: 90 } }, {})).usage).toEqual({ enabled: true, retentionDays: 90 })
    expect(ok(decodeConfig({ usage: { enabled: false, retentionDays: 1 } }, {})).usage).toEqual({ enabled: false, retentionDays: 1 })
    expect(ok(decodeConfig({ usage: {} }, {})).usage).not.toHaveProperty("retentionDays")
    const yaml = parseConfigText("gateway.yaml", "usage:\n  retentionDays: 30\n")
    expect(Either.isRight(yaml) && ok(decodeConfig(yaml.right, {})).usage.retentionDays).toBe(30)
    for (const retentionDays of [0, -3, 1.5, "30", null]) expectExactlyPaths(problemsOf(decodeConfig({ usage: { retentionDays } }, {})), ["usage.retentionDays"])
  })

  it("problems never contain a resolved secret", () => {
    const env = { ADMIN: "tiny", OPENAI_KEY: "sk-never-print-me-0123456789", TEAM: "team-secret-0123456789" }
    const problems = problemsOf(
      decodeConfig(
        {
          adminKey: "env:ADMIN",
          keys: [{ key: "env:TEAM", app: "Bad App" }],
          providers: { p: { type: "openai", baseUrl: "nope", apiKey: "env:OPENAI_KEY", extra: true } }
        },
        env
      )
    )
    const text = problems.join("\n")
    expect(text).not.toContain(env.OPENAI_KEY)
    expect(text).not.toContain(env.TEAM)
    expect(text).not.toContain(`"${env.ADMIN}"`)
    expectExactlyPaths(problems, ["adminKey", "keys.0.app", "providers.p.baseUrl", "providers.p.extra"])
  })
})

describe("decodeConfig: alias routing (strategy, weights, affinity)", () => {
  const providers = { a: { type: "mock" }, b: { type: "mock" } }
  const aliasProblems = (alias: unknown) => problemsOf(decodeConfig({ providers, aliases: { r: alias } }, {}))

  it("an unknown strategy is refused naming aliases.<a>.strategy and the strategies there are", () => {
    const problems = aliasProblems({ strategy: "random", targets: ["a/x", "b/y"] })
    // one line: not also "aliases.r: Expected string" from the string form of an alias
    expectExactlyPaths(problems, ["aliases.r.strategy"])
    expect(problems[0]).toBe('aliases.r.strategy: Expected "ordered" | "weighted" | "least-busy" | "lowest-latency", actual "random"')
  })

  it("a weight of 0, below 0, not a number or not finite is refused naming aliases.<a>.targets.<i>.weight", () => {
    for (const [weight, message] of [
      [0, "Expected a positive number, actual 0"],
      [-2, "Expected a positive number, actual -2"],
      ["2", 'Expected number, actual "2"'],
      [Number.POSITIVE_INFINITY, "Expected a finite number, actual Infinity"]
    ] as const) {
      const problems = aliasProblems({ strategy: "weighted", targets: ["a/x", { model: "b/y", weight }] })
      expectExactlyPaths(problems, ["aliases.r.targets.1.weight"])
      expect(problems[0]).toBe(`aliases.r.targets.1.weight: ${message}`)
    }
  })

  it("a target object without model is refused naming aliases.<a>.targets.<i>.model; a misspelt field is named too", () => {
    expectExactlyPaths(aliasProblems({ strategy: "weighted", targets: ["a/x", { weight: 2 }] }), ["aliases.r.targets.1.model"])
    expect(aliasProblems({ targets: [{ weight: 2 }, "b/y"] })).toEqual(["aliases.r.targets.0.model: is required"])
    const misspelt = aliasProblems({ targets: [{ model: "a/x", wieght: 2 }] })
    expectExactlyPaths(misspelt, ["aliases.r.targets.0.wieght"])
    expect(misspelt[0]).toMatch(/is unexpected/)
  })

  it("an affinity other than none or conversation is refused naming aliases.<a>.affinity", () => {
    const problems = aliasProblems({ affinity: "user", targets: ["a/x", "b/y"] })
    expectExactlyPaths(problems, ["aliases.r.affinity"])
    expect(problems[0]).toBe('aliases.r.affinity: Expected "none" | "conversation", actual "user"')
  })

  it("no targets, and an object target naming an unknown provider, are refused at their paths", () => {
    expectExactlyPaths(aliasProblems({ strategy: "weighted", targets: [] }), ["aliases.r.targets.0"])
    const unknown = aliasProblems({ strategy: "weighted", targets: ["a/x", { model: "ghost/y", weight: 2 }] })
    expectExactlyPaths(unknown, ["aliases.r.targets.1.model"])
    expect(unknown[0]).toContain('"ghost/y"')
  })

  it("every problem of one alias is reported, each at its own path", () => {
    const problems = aliasProblems({ strategy: "fastest", affinity: "sticky", targets: [{ model: "a/x", weight: 0 }, { weight: 1 }] })
    expectExactlyPaths(problems, ["aliases.r.strategy", "aliases.r.affinity", "aliases.r.targets.0.weight", "aliases.r.targets.1.model"])
  })

  it("an alias that is not a string or an object still says what an alias is", () => {
    const problems = aliasProblems(5)
    expectExactlyPaths(problems, ["aliases.r"])
    expect(problems[0]).toMatch(/^aliases\.r: Expected string \| \{.*targets.*\}, actual 5$/)
  })

  it("plain string targets and object targets mix; a target without a weight weighs 1; every strategy and affinity decodes", () => {
    const mixed = { strategy: "weighted", affinity: "conversation", targets: ["a/x", { model: "b/y", weight: 2.5 }, { model: "a/z" }] }
    const config = ok(decodeConfig({ providers, aliases: { r: mixed, plain: "a/x" } }, {}))
    expect(config.aliases.r).toEqual(mixed)
    expect(aliasTargets(config.aliases.r)).toEqual([
      { model: "a/x", weight: 1 },
      { model: "b/y", weight: 2.5 },
      { model: "a/z", weight: 1 }
    ])
    expect(aliasTargets(config.aliases.plain)).toEqual([{ model: "a/x", weight: 1 }])
    for (const strategy of ["ordered", "weighted", "least-busy", "lowest-latency"]) {
      for (const affinity of ["none", "conversation"]) ok(decodeConfig({ providers, aliases: { r: { strategy, affinity, targets: ["a/x", { model: "b/y", weight: 3 }] } } }, {}))
    }
  })

  it("the catalog resolves the mixed alias to its targets with their weights; a provider's apiKeys split its weight evenly", () => {
    const config = ok(
      decodeConfig(
        {
          providers: { a: { type: "mock" }, k: { type: "openai", baseUrl: "http://127.0.0.1:9/v1", apiKeys: ["key-one-0123", "key-two-0123"] } },
          aliases: {
            r: { strategy: "least-busy", targets: ["a/x", { model: "k/y", weight: 3 }] },
            plain: { targets: ["a/x", "k/y"] }
          }
        },
        {}
      )
    )
    const catalog = Catalog.make(config)
    const resolved = Effect.runSync(catalog.resolve("r", catalog.app("default")))
    expect(resolved.targets.map(targetName)).toEqual(["a/x", "k/y#key0", "k/y#key1"])
    expect(resolved.route).toEqual({ alias: "r", strategy: "least-busy", affinity: false, weights: [1, 1.5, 1.5] })
    // an ordered alias without affinity has no route: its targets are tried in the order given
    expect(Effect.runSync(catalog.resolve("plain", catalog.app("default"))).route).toBeUndefined()
  })
})

describe("parseConfigText", () => {
  it("parses YAML (.yaml, .yml, any case) and JSON", () => {
    expect(parseConfigText("a.yaml", "maxTools: 3\n")).toEqual(Either.right({ maxTools: 3 }))
    expect(parseConfigText("a.yml", "maxTools: 3\n")).toEqual(Either.right({ maxTools: 3 }))
    expect(parseConfigText("A.YAML", "maxTools: 3\n")).toEqual(Either.right({ maxTools: 3 }))
    expect(parseConfigText("a.json", '{"maxTools": 3}')).toEqual(Either.right({ maxTools: 3 }))
  })

  it("bad YAML syntax names the file", () => {
    const problems = problemsOf(parseConfigText("conf/bad.yaml", "providers: [\n  x: {\n"))
    expect(problems.length).toBeGreaterThan(0)
    for (const line of problems) {
      expect(line.startsWith("conf/bad.yaml: ")).toBe(true)
      expect(line).not.toContain("\n")
    }
  })

  it("a duplicate YAML key is reported with the file name", () => {
    const problems = problemsOf(parseConfigText("dup.yaml", "maxTools: 1\nmaxTools: 2\n"))
    expect(problems.length).toBeGreaterThan(0)
    expect(problems.every((l) => l.startsWith("dup.yaml: "))).toBe(true)
    expect(problems.join("\n")).toMatch(/unique|duplicate/i)
  })

  it("bad JSON names the file", () => {
    const problems = problemsOf(parseConfigText("bad.json", '{"maxTools": 3,}'))
    expect(problems).toHaveLength(1)
    expect(problems[0]).toMatch(/^bad\.json: not valid JSON/)
  })

  it("an unsupported extension is refused naming the file", () => {
    expect(problemsOf(parseConfigText("gateway.toml", "a = 1"))).toEqual(["gateway.toml: a config file ends in .yaml, .yml or .json"])
    expect(problemsOf(parseConfigText("gateway", "{}"))).toEqual(["gateway: a config file ends in .yaml, .yml or .json"])
  })
})

describe("loadConfigFile", () => {
  let dir: string
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-config-"))
  })
  afterAll(() => {
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const write = (name: string, text: string): string => {
    const file = path.join(dir, name)
    fs.writeFileSync(file, text)
    return file
  }

  it("loads and decodes a YAML file with env: values from the given env", () => {
    const file = write("full.yaml", fullYaml)
    const config = ok(loadConfigFile(file, secrets))
    expect(Redacted.value(config.providers.router.apiKey!)).toBe(secrets.ROUTER_KEY)
  })

  it("loads a .yml and a .json file", () => {
    expect(ok(loadConfigFile(write("a.yml", "providers: { m: { type: mock } }\nmaxTools: 5\n"), {})).maxTools).toBe(5)
    const json = ok(loadConfigFile(write("a.json", JSON.stringify({ providers: { m: { type: "mock" } }, concurrency: 7 })), {}))
    expect(json.concurrency).toBe(7)
    expect(json.providers.m.type).toBe("mock")
  })

  it("a missing file is a problem naming the file", () => {
    const file = path.join(dir, "nope.yaml")
    const problems = problemsOf(loadConfigFile(file, {}))
    expect(problems).toHaveLength(1)
    expect(problems[0].startsWith(`${file}: `)).toBe(true)
    expect(problems[0]).toContain("ENOENT")
  })

  it("a directory is a problem naming it", () => {
    const sub = path.join(dir, "dir.yaml")
    fs.mkdirSync(sub)
    const problems = problemsOf(loadConfigFile(sub, {}))
    expect(problems).toHaveLength(1)
    expect(problems[0].startsWith(`${sub}: `)).toBe(true)
  })

  it("syntax errors and decode errors from a file", () => {
    const bad = write("bad.yaml", "a: [\n")
    expect(problemsOf(loadConfigFile(bad, {})).every((l) => l.startsWith(`${bad}: `))).toBe(true)
    const badJson = write("bad.json", "{")
    expect(problemsOf(loadConfigFile(badJson, {}))[0].startsWith(`${badJson}: not valid JSON`)).toBe(true)
    const wrongExt = write("conf.txt", "maxTools: 1")
    expect(problemsOf(loadConfigFile(wrongExt, {}))).toEqual([`${wrongExt}: a config file ends in .yaml, .yml or .json`])
    const missingEnv = write("env.yaml", "providers:\n  openai: { type: openai, baseUrl: https://x, apiKey: env:NOPE_KEY }\n")
    expect(problemsOf(loadConfigFile(missingEnv, {}))).toEqual(["providers.openai.apiKey: environment variable NOPE_KEY is not set"])
  })
})

describe("secrets are Redacted", () => {
  it("String() and JSON.stringify of the config never contain a key", () => {
    const config = ok(decodeConfig(parseYaml(fullYaml), secrets))
    const apiKey = config.providers.openai.apiKey!
    expect(Redacted.isRedacted(apiKey)).toBe(true)
    expect(String(apiKey)).not.toContain(secrets.OPENAI_API_KEY)
    expect(`${config.adminKey}`).not.toContain(secrets.GATEWAY_ADMIN_KEY)
    expect(String(config.keys[0].key)).not.toContain(secrets.TEAM_A_KEY)
    const json = JSON.stringify(config)
    for (const secret of [...Object.values(secrets), "literal-key-team-a-2"]) expect(json).not.toContain(secret)
    // the value is still reachable on purpose
    expect(Redacted.value(apiKey)).toBe(secrets.OPENAI_API_KEY)
  })
})

describe("defaultConfigDocument", () => {
  it("adds an anthropic provider when ANTHROPIC_API_KEY is set", () => {
    const env = { ANTHROPIC_API_KEY: "sk-ant-default-0123456789" }
    const config = ok(decodeConfig(defaultConfigDocument(env), env))
    expect(Object.keys(config.providers).sort()).toEqual(["anthropic", "mock"])
    expect(config.providers.anthropic.type).toBe("anthropic")
    expect(JSON.stringify(config)).not.toContain(env.ANTHROPIC_API_KEY)
  })

  it("adds a gemini provider when GEMINI_API_KEY is set; GEMINI_BASE_URL overrides its base URL", () => {
    const env = { GEMINI_API_KEY: "AIza-default-0123456789" }
    const document = defaultConfigDocument(env)
    expect(JSON.stringify(document)).not.toContain(env.GEMINI_API_KEY)
    const config = ok(decodeConfig(document, env))
    expect(Object.keys(config.providers).sort()).toEqual(["gemini", "mock"])
    expect(config.providers.gemini.type).toBe("gemini")
    expect(config.providers.gemini.baseUrl).toBe("https://generativelanguage.googleapis.com")
    expect(Redacted.value(config.providers.gemini.apiKey!)).toBe(env.GEMINI_API_KEY)
    expect(JSON.stringify(config)).not.toContain(env.GEMINI_API_KEY)
    const local = { ...env, GEMINI_BASE_URL: "http://127.0.0.1:9090" }
    expect(ok(decodeConfig(defaultConfigDocument(local), local)).providers.gemini.baseUrl).toBe("http://127.0.0.1:9090")
  })

  it("one provider per key found: openai, anthropic and gemini together", () => {
    const env = { OPENAI_API_KEY: "sk-0123456789", ANTHROPIC_API_KEY: "sk-ant-0123456789", GEMINI_API_KEY: "AIza-0123456789" }
    const config = ok(decodeConfig(defaultConfigDocument(env), env))
    expect(Object.keys(config.providers).sort()).toEqual(["anthropic", "gemini", "mock", "openai"])
  })

  it("a gemini provider in a config file decodes; it needs a baseUrl", () => {
    const config = ok(decodeConfig({ providers: { g: { type: "gemini", baseUrl: "https://generativelanguage.googleapis.com", apiKey: "env:G" } } }, { G: "AIza-0123456789" }))
    expect(config.providers.g.type).toBe("gemini")
    expect(problemsOf(decodeConfig({ providers: { g: { type: "gemini" } } }, {}))).toEqual(["providers.g.baseUrl: is required for type gemini"])
  })

  it("always has the mock provider; no openai without OPENAI_API_KEY", () => {
    for (const env of [{}, { OPENAI_API_KEY: "" }, { GEMINI_API_KEY: "" }]) {
      const config = ok(decodeConfig(defaultConfigDocument(env), env))
      expect(Object.keys(config.providers)).toEqual(["mock"])
      expect(config.providers.mock.type).toBe("mock")
      expect(config.listen).toEqual({ host: "127.0.0.1", port: 4080, trustProxy: false, hosts: [] })
      expect(config.dataDir).toBe("./data")
      expect(config.keys).toEqual([])
    }
  })

  it("adds an openai provider when OPENAI_API_KEY is set, keeping the key Redacted and out of the document", () => {
    const env = { OPENAI_API_KEY: "sk-default-secret-0123456789" }
    const document = defaultConfigDocument(env)
    expect(JSON.stringify(document)).not.toContain(env.OPENAI_API_KEY)
    const config = ok(decodeConfig(document, env))
    expect(Object.keys(config.providers).sort()).toEqual(["mock", "openai"])
    expect(config.providers.openai.type).toBe("openai")
    expect(config.providers.openai.baseUrl).toBe("https://api.openai.com/v1")
    expect(Redacted.value(config.providers.openai.apiKey!)).toBe(env.OPENAI_API_KEY)
    expect(JSON.stringify(config)).not.toContain(env.OPENAI_API_KEY)
  })

  it("OPENAI_BASE_URL overrides the openai base URL", () => {
    const env = { OPENAI_API_KEY: "sk-0123456789", OPENAI_BASE_URL: "http://127.0.0.1:11434/v1" }
    expect(ok(decodeConfig(defaultConfigDocument(env), env)).providers.openai.baseUrl).toBe("http://127.0.0.1:11434/v1")
  })

  it("mock/echo is served under the default alias", () => {
    const config = ok(decodeConfig(defaultConfigDocument({}), {}))
    expect(config.aliases.default).toBe("mock/echo")
  })
})

describe("decodeConfig: tool servers and host tools", () => {
  it("the issue's example decodes with every default, headers Redacted", () => {
    const config = ok(
      decodeConfig(
        {
          toolServers: {
            search: { url: "http://127.0.0.1:7000/mcp", headers: { authorization: "env:SEARCH_TOKEN" }, timeoutMs: 30000 },
            files: { command: ["npx", "@modelcontextprotocol/server-filesystem", "."], perApp: true }
          },
          apps: { "team-a": { hostTools: ["search/*", "files/read_text_file", "files/list_directory"], maxHostToolRounds: 8 } },
          agents: { reviewer: { model: "mock/echo", prompt: "You review code.", hostTools: ["files/*"] } },
          providers: { mock: { type: "mock" } }
        },
        { SEARCH_TOKEN: "tok-secret-123" }
      )
    )
    expect(config.toolServers.search.timeoutMs).toBe(30000)
    expect(config.toolServers.search.readyTimeoutMs).toBe(10000)
    expect(config.toolServers.search.perApp).toBe(false)
    expect(config.toolServers.files.perApp).toBe(true)
    expect(config.toolServers.files.timeoutMs).toBe(30000)
    expect(Redacted.value(config.toolServers.search.headers!.authorization)).toBe("tok-secret-123")
    expect(JSON.stringify(config)).not.toContain("tok-secret-123")
    expect(config.apps["team-a"].maxHostToolResultBytes).toBe(262144)
    expect(config.agents.reviewer.hostTools).toEqual(["files/*"])
  })

  it("each problem is named at its path", () => {
    const problems = problemsOf(
      decodeConfig({
        toolServers: {
          both: { url: "http://127.0.0.1:1/mcp", command: ["x"] },
          neither: {},
          "a__b": { url: "http://127.0.0.1:1/mcp" },
          web: { url: "http://127.0.0.1:1/mcp", perApp: true }
        },
        apps: { a: { hostTools: ["nope/*"] } },
        agents: { r: { model: "m", prompt: "p", hostTools: ["ghost/x"] } }
      })
    )
    const schema = problemsOf(decodeConfig({ toolServers: { ftp: { url: "ftp://127.0.0.1/mcp" } }, apps: { a: { hostTools: ["x/y", "no-slash"], maxHostToolRounds: 0 } } }))
    const text = [...problems, ...schema].join("\n")
    expect(text).toContain("toolServers.both: give url (Streamable HTTP) or command (stdio), one of them")
    expect(text).toContain("toolServers.neither: give url")
    expect(text).toContain("toolServers.a__b: a tool server name cannot contain __")
    expect(text).toContain("toolServers.web.perApp: only a stdio server")
    expect(text).toContain("toolServers.ftp.url")
    expect(text).toContain('apps.a.hostTools.0: "nope/*" names no configured tool server')
    expect(text).toContain("apps.a.hostTools.1")
    expect(text).toContain("apps.a.maxHostToolRounds")
    expect(text).toContain('agents.r.hostTools.0: "ghost/x" names no configured tool server')
  })
})
