import type { CanonicalRequest, Message, ToolChoice } from "../../domain/Canonical.js"
import type { ProviderTarget } from "../Provider.js"

/** Chat-completions wire request built from a canonical request (the `openai` provider type). */

type WireContent = string | Array<Record<string, unknown>> | null

const textOf = (parts: ReadonlyArray<{ readonly type: string; readonly text?: string }>) =>
  parts.map((p) => (p.type === "text" ? (p.text ?? "") : "")).join("")

const wireMessages = (request: CanonicalRequest): Array<Record<string, unknown>> => {
  const out: Array<Record<string, unknown>> = []
  if (request.system.length > 0) out.push({ role: "system", content: request.system.map((p) => p.text).join("\n\n") })
  for (const message of request.messages) out.push(...wireMessage(message))
  return out
}

const wireMessage = (message: Message): Array<Record<string, unknown>> => {
  switch (message.role) {
    case "user": {
      // one text part goes as a string; several stay separate parts (joining them would run words together)
      const simple = message.parts.length === 1 && message.parts[0].type === "text"
      const content: WireContent = simple
        ? textOf(message.parts)
        : message.parts.map((p) => {
            switch (p.type) {
              case "text":
                return { type: "text", text: p.text }
              case "image":
                return { type: "image_url", image_url: p.detail !== undefined ? { url: p.url, detail: p.detail } : { url: p.url } }
              case "file":
                return { type: "file", file: { file_data: p.data, ...(p.filename !== undefined ? { filename: p.filename } : {}) } }
            }
          })
      return [{ role: "user", content }]
    }
    case "assistant": {
      const text = textOf(message.parts)
      const calls = message.parts.flatMap((p) =>
        p.type === "tool_call" ? [{ id: p.id, type: "function", function: { name: p.name, arguments: p.arguments } }] : []
      )
      const wire: Record<string, unknown> = { role: "assistant", content: text === "" && calls.length > 0 ? null : text }
      if (calls.length > 0) wire.tool_calls = calls
      return [wire]
    }
    case "tool": {
      const out: Array<Record<string, unknown>> = []
      const images: Array<Record<string, unknown>> = []
      for (const result of message.parts) {
        const text = result.content.map((c) => (c.type === "text" ? c.text : "")).join("")
        out.push({ role: "tool", tool_call_id: result.callId, content: result.isError === true && text === "" ? "error" : text })
        for (const c of result.content) if (c.type === "image") images.push({ type: "image_url", image_url: { url: c.url } })
      }
      // chat-completions tool messages carry text only: images in results follow as user media
      if (images.length > 0) out.push({ role: "user", content: images })
      return out
    }
  }
}

const wireToolChoice = (choice: ToolChoice): unknown => {
  switch (choice.type) {
    case "auto":
    case "none":
    case "required":
      return choice.type
    case "tool":
      return { type: "function", function: { name: choice.name } }
  }
}

/** Whether the upstream wants `max_completion_tokens` (OpenAI's own API) rather than `max_tokens`. */
const usesMaxCompletionTokens = (baseUrl: string) => baseUrl.includes("api.openai.com")

export const buildChatRequest = (target: ProviderTarget, request: CanonicalRequest, baseUrl: string): Record<string, unknown> => {
  const body: Record<string, unknown> = { model: target.model, messages: wireMessages(request) }
  if (request.tools.length > 0) {
    body.tools = request.tools.map((t) => ({
      type: "function",
      function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.parameters }
    }))
    body.tool_choice = wireToolChoice(request.toolChoice)
    if (!request.parallelToolCalls) body.parallel_tool_calls = false
  }
  const s = request.sampling
  if (s.temperature !== undefined) body.temperature = s.temperature
  if (s.topP !== undefined) body.top_p = s.topP
  if (s.seed !== undefined) body.seed = s.seed
  if (s.presencePenalty !== undefined) body.presence_penalty = s.presencePenalty
  if (s.frequencyPenalty !== undefined) body.frequency_penalty = s.frequencyPenalty
  if (s.stop !== undefined && s.stop.length > 0) body.stop = s.stop
  if (request.maxOutputTokens !== undefined) body[usesMaxCompletionTokens(baseUrl) ? "max_completion_tokens" : "max_tokens"] = request.maxOutputTokens
  if (target.reasoningEffort !== undefined) body.reasoning_effort = target.reasoningEffort
  if (request.stream) {
    body.stream = true
    body.stream_options = { include_usage: true }
  }
  if (target.params !== undefined) Object.assign(body, target.params)
  return body
}
