/**
 * Conversations driven the way the real clients drive them, for the routing tests: Codex
 * (Responses, `store: false`, the whole history each turn), Claude Code (Messages, system blocks
 * with `cache_control`, the message cache marker moving to the newest turn, a `role: "system"` entry in
 * `messages`, `metadata.user_id`), Gemini CLI (`systemInstruction` and growing `contents`, streamed
 * and whole), and a Responses chain (`previous_response_id`). The shapes follow REAL-CLIENTS.md,
 * scratchpad/codex-capture and scratchpad/gemini-capture, and captures of Claude Code 2.1.197 and
 * Gemini CLI 0.61 over several tool turns (their system prompt and first message were the same on
 * every turn). Every turn's new message (user text or tool result) carries a marker naming the
 * conversation and turn, so a test can tell which upstream request belongs to which turn.
 */
import { createHash } from "node:crypto"
import OpenAI from "openai"
import { expect } from "vitest"
import { asRecord, isRecord, parseSse, records, type Json } from "../responses/helpers.js"
import type { TestGateway } from "../support/Gateway.js"

/** the key every conversation calls the gateway with */
export const CLIENT_KEY = "sk-affinity-client-0123456789"

/** A uuid-shaped id derived from a name: the same on every run, so every spread is deterministic. */
export const uuidOf = (name: string): string => {
  const h = createHash("sha1").update(name).digest("hex")
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`
}

/** A Claude Code 2.1.197 `metadata.user_id` (a JSON text naming the device and session). */
export const claudeUserJson = (name: string) => JSON.stringify({ device_id: createHash("sha256").update(name).digest("hex"), account_uuid: "", session_id: uuidOf(name) })
/** The older Claude Code `metadata.user_id` form. */
export const claudeUser = (name: string) => `user_${createHash("sha256").update(name).digest("hex")}_account_${uuidOf(`account ${name}`)}_session_${uuidOf(name)}`

export interface Conversation {
  readonly name: string
  /** Sends the next turn to `gw` and reads the answer as the client does; returns the turn's marker. */
  readonly turn: (gw: TestGateway) => Promise<string>
}

const marked = (name: string, n: number) => `[${name}#${n}]`

const expectOk = (status: number, text: string, where: string) => expect(status, `${where}: ${text.slice(0, 400)}`).toBe(200)

const CODEX_INSTRUCTIONS =
  "You are Codex, a coding agent based on GPT-5. You and the user share the same workspace and collaborate to achieve the user's goals.\n\n# Personality\nYou are a deeply pragmatic, effective software engineer."
const CODEX_TOOLS: ReadonlyArray<Json> = [
  {
    type: "function",
    name: "exec_command",
    description: "Runs a command in a PTY, returning output or a session ID for ongoing interaction.",
    strict: false,
    parameters: {
      type: "object",
      properties: { cmd: { type: "string", description: "Shell command to execute." }, workdir: { type: "string" }, yield_time_ms: { type: "number" } },
      required: ["cmd"],
      additionalProperties: false
    }
  },
  {
    type: "custom",
    name: "apply_patch",
    description: "The `apply_patch` tool can be used to edit files. This is a FREEFORM tool, so do not wrap the patch in JSON.",
    format: {
      type: "grammar",
      syntax: "lark",
      definition: 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\nend_patch: "*** End Patch" LF?\nhunk: /(.+)/ LF\n%import common.LF\n'
    }
  },
  { type: "web_search", external_web_access: false, search_content_types: ["text", "image"] }
]

/**
 * Codex: `POST /v1/responses`, streamed, `store: false`, the whole history each turn (developer
 * and environment-context items first, then user messages, the output items echoed verbatim as
 * they came in `response.output_item.done`, and `function_call_output`s), the same instructions
 * (older Codex) or base-prompt developer item (0.169) every turn, and, unless `promptCacheKey` is
 * null, the session's `prompt_cache_key`.
 */
export const codex = (
  name: string,
  options: {
    readonly promptCacheKey: string | null
    /** false: Codex 0.169's shape, the base prompt as the first developer item instead of `instructions` */
    readonly instructions?: boolean
    readonly model?: string
  }
): Conversation => {
  const session = uuidOf(`codex ${name}`)
  const withInstructions = options.instructions ?? true
  const history: Array<Json> = [
    ...(withInstructions ? [] : [{ type: "message", id: `msg_${uuidOf(`base ${name}`)}`, role: "developer", content: [{ type: "input_text", text: CODEX_INSTRUCTIONS }] }]),
    {
      type: "message",
      id: `msg_${uuidOf(`dev ${name}`)}`,
      role: "developer",
      content: [{ type: "input_text", text: "<permissions instructions>\nFilesystem sandboxing: workspace-write. Approval policy: never.\n</permissions instructions>" }]
    },
    {
      type: "message",
      id: `msg_${uuidOf(`env ${name}`)}`,
      role: "user",
      content: [{ type: "input_text", text: `<environment_context>\n  <cwd>/tmp/codex-work-${name}</cwd>\n  <shell>bash</shell>\n</environment_context>` }]
    }
  ]
  let pendingCall: string | undefined
  let n = 0
  return {
    name,
    turn: async (gw) => {
      const marker = marked(name, ++n)
      history.push(
        pendingCall === undefined
          ? { type: "message", id: `msg_${uuidOf(`${name} ${n}`)}`, role: "user", content: [{ type: "input_text", text: `Step ${n}: what is in this repository? ${marker}` }] }
          : { type: "function_call_output", call_id: pendingCall, output: `Chunk ID: a1f039\nProcess exited with code 0\nOutput:\nREADME.md src ${marker}\n` }
      )
      const body = {
        model: options.model ?? "gpt-5.5",
        ...(withInstructions ? { instructions: CODEX_INSTRUCTIONS } : {}),
        input: history,
        tools: CODEX_TOOLS,
        tool_choice: "auto",
        parallel_tool_calls: true,
        reasoning: { effort: "medium" },
        store: false,
        stream: true,
        include: ["reasoning.encrypted_content"],
        ...(options.promptCacheKey !== null ? { prompt_cache_key: options.promptCacheKey } : {}),
        text: { verbosity: "low" },
        client_metadata: { session_id: session, thread_id: session }
      }
      const res = await fetch(`${gw.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${CLIENT_KEY}`, "content-type": "application/json", accept: "text/event-stream", originator: "codex_exec", "session-id": session },
        body: JSON.stringify(body)
      })
      const text = await res.text()
      expectOk(res.status, text, `${name} turn ${n}`)
      const { events } = parseSse(text)
      expect(events.map((e) => e.event), `${name} turn ${n}`).toContain("response.completed")
      const items = events.filter((e) => e.event === "response.output_item.done").map((e) => asRecord(e.data.item, "output item"))
      expect(items.length, `${name} turn ${n}`).toBeGreaterThan(0)
      history.push(...items)
      const call = items.find((i) => i.type === "function_call")
      pendingCall = call === undefined ? undefined : String(call.call_id)
      return marker
    }
  }
}

const CLAUDE_SYSTEM: ReadonlyArray<Json> = [
  { type: "text", text: "x-anthropic-billing-header: cc_version=2.1.197.c40; cc_entrypoint=sdk-cli;" },
  { type: "text", text: "You are a Claude agent, built on Anthropic's Claude Agent SDK.", cache_control: { type: "ephemeral" } },
  {
    type: "text",
    text: "\nYou are an interactive agent that helps users with software engineering tasks.\n\nIMPORTANT: Assist with authorized security testing only.\n\n# Tone and style\nBe concise.",
    cache_control: { type: "ephemeral" }
  }
]
const CLAUDE_TOOLS: ReadonlyArray<Json> = [
  {
    name: "Bash",
    description: "Executes a given bash command and returns its output.",
    input_schema: {
      $schema: "http://json-schema.org/draft-07/schema#",
      type: "object",
      properties: { command: { type: "string", description: "The command to execute" }, description: { type: "string" }, timeout: { type: "number" } },
      required: ["command"],
      additionalProperties: false
    }
  },
  {
    name: "Read",
    description: "Reads a file from the local filesystem.",
    input_schema: { type: "object", properties: { file_path: { type: "string" } }, required: ["file_path"], additionalProperties: false }
  }
]

/** Claude Code's messages with its one cache marker on the last block of the last turn (it moves every turn). */
const withMovingCacheMarker = (messages: ReadonlyArray<Json>): Array<Json> => {
  const copy = messages.map((m): Json => ({ ...m, content: Array.isArray(m.content) ? records(m.content).map(({ cache_control: _, ...block }) => ({ ...block })) : m.content }))
  const last = [...copy].reverse().find((m) => m.role !== "system" && Array.isArray(m.content))
  if (last !== undefined && Array.isArray(last.content)) {
    const blocks = records(last.content)
    blocks[blocks.length - 1] = { ...blocks[blocks.length - 1], cache_control: { type: "ephemeral" } }
    last.content = blocks
  }
  return copy
}

/** The content blocks of a streamed Messages answer, put together as the SDK does. */
const messagesAnswer = (text: string): Array<Json> => {
  const { events } = parseSse(text)
  expect(events.map((e) => e.event)).toContain("message_stop")
  const blocks: Array<Json> = []
  const json = new Map<number, string>()
  for (const { event, data } of events) {
    const index = typeof data.index === "number" ? data.index : -1
    if (event === "content_block_start") blocks[index] = { ...asRecord(data.content_block, "content_block") }
    else if (event === "content_block_delta") {
      const delta = asRecord(data.delta, "delta")
      if (delta.type === "text_delta") blocks[index] = { ...blocks[index], text: `${String(blocks[index].text ?? "")}${String(delta.text)}` }
      if (delta.type === "input_json_delta") json.set(index, `${json.get(index) ?? ""}${String(delta.partial_json)}`)
    } else if (event === "content_block_stop" && json.has(index)) blocks[index] = { ...blocks[index], input: JSON.parse(json.get(index) || "{}") as unknown }
  }
  return blocks
}

/**
 * Claude Code: `POST /v1/messages?beta=true`, streamed; system blocks with `cache_control`; the
 * first user message is a `<system-reminder>` block and the prompt, followed by a `role: "system"`
 * entry (as 2.1.197 sends it); the history grows with tool_use / tool_result turns; the one
 * message cache marker moves to the newest turn; `metadata.user_id` unless null.
 */
export const claudeCode = (name: string, userId: string | null): Conversation => {
  const first: Array<Json> = [
    {
      type: "text",
      text: `<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# currentDate\nToday's date is 2026-11-26.\n# cwd\n/tmp/claude-work-${name}\n</system-reminder>\n`
    }
  ]
  const messages: Array<Json> = [
    { role: "user", content: first },
    { role: "system", content: [{ type: "text", text: "Available agent types for the Agent tool:\n- general-purpose: for researching complex questions (Tools: *)" }] }
  ]
  let pendingUse: string | undefined
  let n = 0
  return {
    name,
    turn: async (gw) => {
      const marker = marked(name, ++n)
      if (n === 1) first.push({ type: "text", text: `Find out why the build fails ${marker}` })
      else
        messages.push(
          pendingUse === undefined
            ? { role: "user", content: [{ type: "text", text: `Good. Next, step ${n} ${marker}` }] }
            : { role: "user", content: [{ type: "tool_result", tool_use_id: pendingUse, content: `README.md\nsrc ${marker}`, is_error: false }] }
        )
      const body = {
        model: "claude-opus-4-8",
        max_tokens: 32000,
        stream: true,
        system: CLAUDE_SYSTEM,
        messages: withMovingCacheMarker(messages),
        tools: CLAUDE_TOOLS,
        ...(userId !== null ? { metadata: { user_id: userId } } : {})
      }
      const res = await fetch(`${gw.url}/v1/messages?beta=true`, {
        method: "POST",
        headers: { "x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14", "content-type": "application/json" },
        body: JSON.stringify(body)
      })
      const text = await res.text()
      expectOk(res.status, text, `${name} turn ${n}`)
      const blocks = messagesAnswer(text)
      expect(blocks.length, `${name} turn ${n}`).toBeGreaterThan(0)
      messages.push({ role: "assistant", content: blocks })
      const use = blocks.find((b) => b.type === "tool_use")
      pendingUse = use === undefined ? undefined : String(use.id)
      return marker
    }
  }
}

const GEMINI_SYSTEM = {
  role: "user",
  parts: [{ text: "You are Gemini CLI, an autonomous CLI agent specializing in software engineering tasks.\n\n# Core Mandates\n...\n**Default** mode." }]
}
const GEMINI_TOOLS = [
  {
    functionDeclarations: [
      {
        name: "list_directory",
        description: "Lists the names of files and subdirectories directly within a specified directory path.",
        parametersJsonSchema: { type: "object", properties: { dir_path: { type: "string" } }, required: ["dir_path"] }
      },
      {
        name: "read_file",
        description: "Reads and returns the content of a specified file.",
        parametersJsonSchema: { type: "object", properties: { file_path: { type: "string" } }, required: ["file_path"] }
      }
    ]
  }
]

/**
 * Gemini CLI: `systemInstruction` (role "user") and growing `contents`, turns alternately streamed
 * (`:streamGenerateContent?alt=sse`, as the CLI's main turns) and whole (`:generateContent`).
 * `session-context`: 0.61's first content, the session context and the prompt as two parts;
 * `acknowledged`: the older CLI's environment-context user turn and the model's acknowledgement
 * before the first prompt. Function calls are resent with their id and the sentinel signature,
 * thought parts dropped, as the CLI does.
 */
export const geminiCli = (name: string, shape: "session-context" | "acknowledged"): Conversation => {
  const context = `<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Thursday, November 26, 2026.\nMy operating system is: linux\nI'm currently working in the directory: /tmp/gemini-cli-work-${name}\n</session_context>`
  const contents: Array<Json> =
    shape === "acknowledged"
      ? [
          { role: "user", parts: [{ text: context }] },
          { role: "model", parts: [{ text: "Got it. Thanks for the context!" }] }
        ]
      : []
  let pendingCall: Json | undefined
  let n = 0
  return {
    name,
    turn: async (gw) => {
      const marker = marked(name, ++n)
      const prompt = { text: `List what is here, step ${n} ${marker}` }
      if (n === 1 && shape === "session-context") contents.push({ role: "user", parts: [{ text: context }, prompt] })
      else if (pendingCall === undefined) contents.push({ role: "user", parts: [prompt] })
      else contents.push({ role: "user", parts: [{ functionResponse: { id: pendingCall.id, name: pendingCall.name, response: { output: `Directory listing:\na.txt ${marker}` } } }] })
      const streamed = n % 2 === 1
      const body = {
        contents,
        systemInstruction: GEMINI_SYSTEM,
        tools: GEMINI_TOOLS,
        generationConfig: { temperature: 1, topP: 0.95, topK: 64, thinkingConfig: { includeThoughts: true, thinkingBudget: 8192 } }
      }
      const method = streamed ? "streamGenerateContent?alt=sse" : "generateContent"
      const res = await fetch(`${gw.url}/v1beta/models/gemini-2.5-flash:${method}`, {
        method: "POST",
        headers: { "x-goog-api-key": CLIENT_KEY, "content-type": "application/json", "x-goog-api-client": "google-genai-sdk/1.30.0 gl-node/v20.20.2" },
        body: JSON.stringify(body)
      })
      const text = await res.text()
      expectOk(res.status, text, `${name} turn ${n}`)
      const chunks = streamed ? parseSse(text).events.map((e) => e.data) : [asRecord(JSON.parse(text) as unknown, "generateContent answer")]
      const parts = chunks.flatMap((chunk) => records(chunk.candidates ?? []).flatMap((c) => records(asRecord(c.content ?? { parts: [] }, "content").parts ?? [])))
      const said = parts.filter((p) => typeof p.text === "string" && p.thought !== true).map((p) => String(p.text)).join("")
      const calls = parts.filter((p) => isRecord(p.functionCall)).map((p, i) => {
        const call = asRecord(p.functionCall, "functionCall")
        return { ...call, id: typeof call.id === "string" ? call.id : `${String(call.name)}_${1795321540975 + n}_${i}` }
      })
      expect(said !== "" || calls.length > 0, `${name} turn ${n}: ${text.slice(0, 300)}`).toBe(true)
      contents.push({
        role: "model",
        parts: [...(said !== "" ? [{ text: said }] : []), ...calls.map((call) => ({ functionCall: call, thoughtSignature: "skip_thought_signature_validator" }))]
      })
      pendingCall = calls[0]
      return marker
    }
  }
}

const LOOKUP = {
  type: "function" as const,
  name: "lookup",
  description: "Looks a fact up in the knowledge base.",
  parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"], additionalProperties: false },
  strict: false
}

/** A Responses chain (the openai SDK): `store` on, each turn only the new input and `previous_response_id`. */
export const responsesChain = (name: string): Conversation => {
  let previous: string | undefined
  let pendingCall: string | undefined
  let n = 0
  return {
    name,
    turn: async (gw) => {
      const marker = marked(name, ++n)
      const client = new OpenAI({ apiKey: CLIENT_KEY, baseURL: `${gw.url}/v1`, maxRetries: 0, timeout: 15_000 })
      const response = await client.responses.create({
        model: "gpt-5.5",
        instructions: "You are the support assistant of a bakery. Look facts up before answering.",
        input: pendingCall === undefined ? `Question ${n}: when do you open? ${marker}` : [{ type: "function_call_output", call_id: pendingCall, output: `Open 7-18 ${marker}` }],
        tools: [LOOKUP],
        store: true,
        ...(previous !== undefined ? { previous_response_id: previous } : {})
      })
      expect(response.status, `${name} turn ${n}`).toBe("completed")
      previous = response.id
      pendingCall = response.output.flatMap((item) => (item.type === "function_call" ? [item.call_id] : []))[0]
      return marker
    }
  }
}
