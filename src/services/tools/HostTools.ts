import type { CallToolResult } from "@modelcontextprotocol/client"
import { Context, Effect, Layer } from "effect"
import { Settings, DEFAULT_MAX_HOST_TOOL_RESULT_BYTES, DEFAULT_MAX_HOST_TOOL_ROUNDS, type GatewayConfig } from "../../Config.js"
import type { CanonicalRequest, ImagePart, TextPart, ToolCall, ToolDefinition, ToolResultPart } from "../../domain/Canonical.js"
import { Errors, type GatewayError } from "../../domain/Errors.js"
import { globMatch, parseModelId } from "../../domain/ModelId.js"
import { flattenName } from "../../domain/ToolNames.js"
import { Metrics } from "../ops/Metrics.js"
import { type HostCallRecord, UsageLog } from "../usage/Usage.js"
import { ToolServers, type CallOutcome, type Progress } from "./ToolServers.js"

/**
 * Host tools: the tools of the operator's MCP servers that an app runs through the gateway. The
 * app's `hostTools` patterns pick them (`<server>/<tool>`, globs allowed); an agent grants a subset
 * of them. The model sees each as `<server>__<tool>` (shortened past 64 characters as namespaces
 * are); the gateway calls it and hands the result back to the model.
 */

/** One host tool offered to the model. */
export interface HostTool {
  /** the name the model sees */
  readonly name: string
  readonly server: string
  /** the tool's name on its server */
  readonly tool: string
  readonly definition: ToolDefinition
}

/** The host tools a request is offered, and the app's loop settings. */
export interface Offer {
  readonly app: string
  readonly tools: ReadonlyArray<HostTool>
  readonly byName: ReadonlyMap<string, HostTool>
  readonly maxRounds: number
  readonly maxResultBytes: number
}

/** One host tool call as metrics and the usage report count it. */
export type HostCallOutcome = "ok" | "error" | "timeout" | "failed"

/** Letters, digits, `_` and `-`: what every upstream takes in a tool name. */
const safeName = (name: string) => name.replace(/[^A-Za-z0-9_-]/g, "_")

export const exposedName = (server: string, tool: string): string => flattenName(server, safeName(tool))

/** Whether a name is shaped as a host tool of one of these servers (`<server>__...`). */
const hostShaped = (servers: ReadonlyArray<string>, name: string) => servers.some((server) => name.startsWith(`${server}__`))

/**
 * Whether a request of this app may name `name` in its `tool_choice` though the caller declares no
 * such tool: the app has host tools and the name is shaped as one. The protocol decoders let such a
 * choice through; `HostTools.apply` then refuses it unless the request is offered that host tool.
 */
export const mayNameHostTool =
  (config: GatewayConfig, app: string) =>
  (name: string): boolean =>
    (config.apps[app]?.hostTools?.length ?? 0) > 0 && hostShaped(Object.keys(config.toolServers), name)

const byteLength = (text: string) => Buffer.byteLength(text, "utf8")

/** The first `bytes` UTF-8 bytes of a text, never splitting a character. */
const cutText = (text: string, bytes: number): string => {
  const buffer = Buffer.from(text, "utf8")
  if (buffer.length <= bytes) return text
  let end = bytes
  // back off continuation bytes so the cut lands on a character boundary
  while (end > 0 && (buffer[end] & 0xc0) === 0x80) end--
  return buffer.subarray(0, end).toString("utf8")
}

/**
 * What the model gets back from a call: text as text, `structuredContent` as JSON text (when no
 * text block already carries it: as its JSON, or every string in it, as server-filesystem's
 * `{ content }` repeats the text it answers), images as image parts, other blocks described in a line; cut
 * past `maxBytes` with a note saying so. The result is data for the model: nothing in it is read
 * by the gateway.
 */
export const resultContent = (result: CallToolResult, maxBytes: number): ReadonlyArray<TextPart | ImagePart> => {
  const parts: Array<TextPart | ImagePart> = []
  const texts: Array<string> = []
  for (const block of result.content ?? []) {
    switch (block.type) {
      case "text":
        parts.push({ type: "text", text: block.text })
        texts.push(block.text)
        break
      case "image":
        parts.push({ type: "image", url: `data:${block.mimeType};base64,${block.data}`, mediaType: block.mimeType })
        break
      case "audio":
        parts.push({ type: "text", text: `[audio result (${block.mimeType}) not shown to the model]` })
        break
      case "resource_link":
        parts.push({ type: "text", text: `[resource ${block.name}: ${block.uri}]` })
        break
      case "resource": {
        const resource = block.resource
        parts.push({ type: "text", text: "text" in resource && typeof resource.text === "string" ? resource.text : `[binary resource ${resource.uri} not shown to the model]` })
        break
      }
      default:
        parts.push({ type: "text", text: "[a result block of a kind the gateway does not show]" })
    }
  }
  if (result.structuredContent !== undefined) {
    const json = JSON.stringify(result.structuredContent)
    if (!texts.some((t) => t === json || safeParse(t) === json) && !stringsShown(result.structuredContent, texts.join("\n"))) parts.push({ type: "text", text: json })
  }
  if (parts.length === 0) parts.push({ type: "text", text: "" })
  return capParts(parts, maxBytes)
}

/** Whether every value in it (strings, numbers, booleans; at least one string) is in the text: a structured copy of what the text says. */
const stringsShown = (value: unknown, text: string): boolean => {
  const leaves: Array<string> = []
  let strings = 0
  const collect = (v: unknown, depth: number): void => {
    if (typeof v === "string") {
      strings++
      leaves.push(v)
    } else if (typeof v === "number" || typeof v === "boolean") leaves.push(String(v))
    else if (depth < 16 && typeof v === "object" && v !== null) for (const item of Array.isArray(v) ? v : Object.values(v)) collect(item, depth + 1)
  }
  collect(value, 0)
  return strings > 0 && leaves.every((leaf) => text.includes(leaf))
}

const safeParse = (text: string): string | undefined => {
  try {
    return JSON.stringify(JSON.parse(text))
  } catch {
    return undefined
  }
}

/** The parts up to `maxBytes` in all (an image counts its data URL), and a note when something was cut. */
export const capParts = (parts: ReadonlyArray<TextPart | ImagePart>, maxBytes: number): ReadonlyArray<TextPart | ImagePart> => {
  let total = 0
  for (const part of parts) total += byteLength(part.type === "text" ? part.text : part.url)
  if (total <= maxBytes) return parts
  const kept: Array<TextPart | ImagePart> = []
  let left = maxBytes
  for (const part of parts) {
    if (left <= 0) break
    if (part.type === "text") {
      const size = byteLength(part.text)
      if (size <= left) {
        kept.push(part)
        left -= size
      } else {
        kept.push({ type: "text", text: cutText(part.text, left) })
        left = 0
      }
    } else {
      const size = byteLength(part.url)
      if (size <= left) {
        kept.push(part)
        left -= size
      }
    }
  }
  kept.push({ type: "text", text: `\n[result cut by the gateway: ${total} bytes, over its limit of ${maxBytes} bytes; only the first part is shown]` })
  return kept
}

/** A data URL's media type and base64 data. */
const dataUrl = /^data:([^;,]+);base64,(.*)$/s

/**
 * A server's result as an MCP client gets it from the gateway: unchanged when its JSON is within
 * `maxBytes`; past that, the blocks the model would see (text, images; `structuredContent` as JSON
 * text), cut with the same note.
 */
export const capResult = (result: CallToolResult, maxBytes: number): CallToolResult => {
  if (byteLength(JSON.stringify(result)) <= maxBytes) return result
  const content = resultContent(result, maxBytes).map((part) => {
    if (part.type === "text") return { type: "text" as const, text: part.text }
    const match = dataUrl.exec(part.url)
    return match === null ? { type: "text" as const, text: "[an image the gateway cannot pass on]" } : { type: "image" as const, mimeType: match[1], data: match[2] }
  })
  return { content, ...(result.isError === true ? { isError: true } : {}) }
}

export class HostTools extends Context.Tag("gateway/HostTools")<
  HostTools,
  {
    /** whether the app is configured with host tools (its runtime keys are refused) */
    readonly appHasHostTools: (app: string) => boolean
    /**
     * The host tools a request of this app to this model is offered (undefined: none, as for an
     * app without host tools, an agent that grants none, or `tool_choice` none). Has the side
     * effects of a request: the app directory is created, a per-app server started, and a server
     * not ready answers 503 `not_ready`.
     */
    readonly offer: (app: string, model: string, request: CanonicalRequest) => Effect.Effect<Offer | undefined, GatewayError>
    /**
     * The request with the offered host tools beside the caller's. A caller tool named as a host
     * tool is a clash; a `tool_choice` naming a host tool this request is not offered is refused.
     */
    readonly apply: (request: CanonicalRequest, offer: Offer | undefined) => Effect.Effect<CanonicalRequest, GatewayError>
    /** Run one host call: its result as the model should see it (failures are error results). */
    readonly call: (offer: Offer, call: ToolCall) => Effect.Effect<ToolResultPart>
    /**
     * All of the app's host tools, as a request with no agent and no `tool_choice` is offered them
     * (the gateway's own MCP server lists these), with the same side effects as `offer`.
     */
    readonly offerAll: (app: string) => Effect.Effect<Offer | undefined, GatewayError>
    /**
     * Run one host call for an MCP client: the server's own result (content blocks as they came),
     * cut past `maxHostToolResultBytes` as `capResult` says; failures and timeouts are error
     * results. Same timeout and metrics as a call the model makes. `onProgress` gets the server's
     * progress notifications for the call.
     */
    readonly callTool: (offer: Offer, tool: HostTool, args: Record<string, unknown>, onProgress?: (progress: Progress) => void) => Effect.Effect<CallToolResult>
  }
>() {
  static readonly layer = Layer.effect(
    HostTools,
    Effect.gen(function* () {
      const config = yield* Settings
      const servers = yield* ToolServers
      const metrics = yield* Metrics
      const usage = yield* UsageLog
      const serverNames = Object.keys(config.toolServers)

      const appHasHostTools = (app: string) => (config.apps[app]?.hostTools?.length ?? 0) > 0

      /** Which patterns grant a server's tool. */
      const grants = (patterns: ReadonlyArray<string>, server: string, tool: string) =>
        patterns.some((p) => {
          const slash = p.indexOf("/")
          return globMatch(p.slice(0, slash), server) && globMatch(p.slice(slash + 1), tool)
        })

      /** The servers any of the patterns can reach. */
      const serversOf = (patterns: ReadonlyArray<string>) => serverNames.filter((name) => patterns.some((p) => globMatch(p.slice(0, p.indexOf("/")), name)))

      /** The app's tools that its patterns (and the agent's, when there is one) grant, listed by their servers. */
      const listOffer = (app: string, patterns: ReadonlyArray<string>, agentPatterns: ReadonlyArray<string> | undefined): Effect.Effect<Offer | undefined, GatewayError> => {
        const appConfig = config.apps[app]
        const wanted = serversOf(patterns).filter((name) => agentPatterns === undefined || serversOf(agentPatterns).includes(name))
        const listOf = (name: string) => Effect.map(servers.tools(name, app), (tools) => ({ name, tools }))
        return Effect.map(
          // one server (the usual app) is listed in this fiber: a concurrent forEach forks a child fiber even for one
          wanted.length === 1 ? Effect.map(listOf(wanted[0]), (one) => [one]) : Effect.forEach(wanted, listOf, { concurrency: "unbounded" }),
          (listed): Offer | undefined => {
            const tools: Array<HostTool> = []
            const byName = new Map<string, HostTool>()
            for (const { name: server, tools: serverTools } of listed) {
              for (const tool of serverTools) {
                if (!grants(patterns, server, tool.name)) continue
                if (agentPatterns !== undefined && !grants(agentPatterns, server, tool.name)) continue
                const name = exposedName(server, tool.name)
                if (byName.has(name)) continue
                const host: HostTool = {
                  name,
                  server,
                  tool: tool.name,
                  definition: { name, ...(tool.description !== undefined ? { description: tool.description } : {}), parameters: tool.inputSchema }
                }
                tools.push(host)
                byName.set(name, host)
              }
            }
            if (tools.length === 0) return undefined
            return {
              app,
              tools,
              byName,
              maxRounds: appConfig?.maxHostToolRounds ?? DEFAULT_MAX_HOST_TOOL_ROUNDS,
              maxResultBytes: appConfig?.maxHostToolResultBytes ?? DEFAULT_MAX_HOST_TOOL_RESULT_BYTES
            }
          }
        )
      }

      const offer = (app: string, model: string, request: CanonicalRequest): Effect.Effect<Offer | undefined, GatewayError> =>
        Effect.suspend(() => {
          const appConfig = config.apps[app]
          const patterns = appConfig?.hostTools ?? []
          if (patterns.length === 0) return Effect.succeed(undefined)
          const base = parseModelId(model).base
          const agent = base.startsWith("agent/") ? config.agents[base.slice(6)] : undefined
          const agentPatterns = base.startsWith("agent/") ? (agent?.hostTools ?? []) : undefined
          const directory = servers.appDirectory(app)
          // an agent granting nothing, or tool_choice none: no host tools (the directory is still the app's)
          if (request.toolChoice.type === "none" || (agentPatterns !== undefined && agentPatterns.length === 0)) return Effect.as(directory, undefined)
          return Effect.zipRight(directory, listOffer(app, patterns, agentPatterns))
        })

      const offerAll = (app: string): Effect.Effect<Offer | undefined, GatewayError> =>
        Effect.suspend(() => {
          const patterns = config.apps[app]?.hostTools ?? []
          if (patterns.length === 0) return Effect.succeed(undefined)
          return Effect.zipRight(servers.appDirectory(app), listOffer(app, patterns, undefined))
        })

      /** Whether a name is shaped as a host tool of a configured server (`<server>__...`). */
      const looksHosted = (name: string) => hostShaped(serverNames, name)

      const apply = (request: CanonicalRequest, offer: Offer | undefined): Effect.Effect<CanonicalRequest, GatewayError> => {
        const choice = request.toolChoice
        const callerNamed = choice.type === "tool" && request.tools.some((t) => t.name === choice.name)
        if (offer === undefined) {
          if (choice.type === "tool" && !callerNamed && looksHosted(choice.name)) {
            return Effect.fail(Errors.invalidRequest("invalid_request_error", `tool_choice names the host tool '${choice.name}', which this request is not offered`, { param: "tool_choice" }))
          }
          return Effect.succeed(request)
        }
        for (const tool of request.tools) {
          if (offer.byName.has(tool.name)) {
            return Effect.fail(
              Errors.invalidRequest("invalid_request_error", `The tool '${tool.name}' has the name of a host tool the gateway runs for this app; rename it`, { param: "tools" })
            )
          }
        }
        if (choice.type === "tool" && !callerNamed && !offer.byName.has(choice.name) && looksHosted(choice.name)) {
          return Effect.fail(Errors.invalidRequest("invalid_request_error", `tool_choice names the host tool '${choice.name}', which this request is not offered`, { param: "tool_choice" }))
        }
        return Effect.succeed({ ...request, tools: [...request.tools, ...offer.tools.map((t) => t.definition)] })
      }

      /** A call counted in `/gateway/metrics` and `/gateway/usage`. */
      const count = (call: HostCallRecord & { readonly outcome: HostCallOutcome }) => {
        metrics.hostToolCall(call)
        usage.recordHostCall(call)
      }

      /** Call a host tool on its server, counted per server, tool and outcome with its latency. */
      const callHost = (offer: Offer, host: HostTool, args: Record<string, unknown>, onProgress?: (progress: Progress) => void): Effect.Effect<CallOutcome> =>
        Effect.suspend(() => {
          const t0 = performance.now()
          return Effect.map(servers.call(host.server, offer.app, host.tool, args, onProgress), (outcome) => {
            const counted: HostCallOutcome = outcome._tag === "Failed" ? (outcome.timedOut ? "timeout" : "failed") : outcome.result.isError === true ? "error" : "ok"
            count({ app: offer.app, server: host.server, tool: host.tool, outcome: counted, latencyMs: performance.now() - t0 })
            return outcome
          })
        })

      const errorResult = (callId: string, name: string, text: string): ToolResultPart => ({ type: "tool_result", callId, name, content: [{ type: "text", text }], isError: true })

      const call = (offer: Offer, toolCall: ToolCall): Effect.Effect<ToolResultPart> =>
        Effect.suspend(() => {
          const host = offer.byName.get(toolCall.name)
          if (host === undefined) return Effect.succeed(errorResult(toolCall.id, toolCall.name, `No host tool named ${toolCall.name}`))
          let args: Record<string, unknown>
          try {
            const parsed: unknown = toolCall.arguments.trim() === "" ? {} : JSON.parse(toolCall.arguments)
            if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("not an object")
            args = parsed as Record<string, unknown>
          } catch {
            count({ app: offer.app, server: host.server, tool: host.tool, outcome: "error", latencyMs: 0 })
            return Effect.succeed(errorResult(toolCall.id, toolCall.name, "The arguments are not a JSON object; call the tool again with a JSON object of its parameters."))
          }
          return Effect.map(callHost(offer, host, args), (outcome): ToolResultPart => {
            if (outcome._tag === "Failed") return errorResult(toolCall.id, toolCall.name, `The tool call failed: ${outcome.reason}.`)
            const isError = outcome.result.isError === true
            return {
              type: "tool_result",
              callId: toolCall.id,
              name: toolCall.name,
              content: resultContent(outcome.result, offer.maxResultBytes),
              ...(isError ? { isError: true } : {})
            }
          })
        })

      const callTool = (offer: Offer, host: HostTool, args: Record<string, unknown>, onProgress?: (progress: Progress) => void): Effect.Effect<CallToolResult> =>
        Effect.map(callHost(offer, host, args, onProgress), (outcome): CallToolResult =>
          outcome._tag === "Failed" ? { content: [{ type: "text", text: `The tool call failed: ${outcome.reason}.` }], isError: true } : capResult(outcome.result, offer.maxResultBytes)
        )

      return HostTools.of({ appHasHostTools, offer, apply, call, offerAll, callTool })
    })
  )
}
