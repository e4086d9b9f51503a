import type { ModelEvent } from "../domain/Canonical.js"

/**
 * Stop sequences matched by the gateway on answer text (Messages `stop_sequences`, Gemini
 * `stopSequences`): across chunk boundaries, never on reasoning. The answer ends at the first
 * match; the text before it is kept, the sequence removed and reported. A tool call before the
 * match makes the turn a tool turn with no stop sequence; later text and calls are dropped; usage
 * still passes (it covers the whole run).
 */

export interface TextMatcher {
  /** text that can be released now, and the sequence when this piece completed a match */
  readonly push: (text: string) => { readonly emit: string; readonly matched?: string }
  /** text held back at the end (a partial match that never completed) */
  readonly flush: () => string
}

export const makeTextMatcher = (stops: ReadonlyArray<string>): TextMatcher => {
  const sequences = stops.filter((s) => s.length > 0)
  let pending = ""
  let done = false
  return {
    push: (text) => {
      if (done) return { emit: "" }
      const buffer = pending + text
      let at = -1
      let which = ""
      for (const s of sequences) {
        const i = buffer.indexOf(s)
        if (i >= 0 && (at < 0 || i < at)) {
          at = i
          which = s
        }
      }
      if (at >= 0) {
        done = true
        pending = ""
        return { emit: buffer.slice(0, at), matched: which }
      }
      // hold back the longest tail that could still start a sequence
      let hold = 0
      for (const s of sequences) {
        for (let n = Math.min(s.length - 1, buffer.length); n > hold; n--) {
          if (buffer.endsWith(s.slice(0, n))) {
            hold = n
            break
          }
        }
      }
      pending = buffer.slice(buffer.length - hold)
      return { emit: buffer.slice(0, buffer.length - hold) }
    },
    flush: () => {
      const rest = done ? "" : pending
      pending = ""
      return rest
    }
  }
}

export interface StopFilter {
  /** the events to pass on for one model event */
  readonly event: (event: ModelEvent) => ReadonlyArray<ModelEvent>
  /** the matched sequence, once the answer ended on one with no tool call before it */
  readonly matched: () => string | undefined
}

export const makeStopFilter = (stops: ReadonlyArray<string>): StopFilter => {
  const matcher = makeTextMatcher(stops)
  let matched: string | undefined
  let called = false
  return {
    event: (event) => {
      switch (event._tag) {
        case "TextDelta": {
          if (matched !== undefined) return []
          const out = matcher.push(event.text)
          if (out.matched !== undefined) matched = out.matched
          return out.emit === "" ? [] : [{ _tag: "TextDelta", text: out.emit }]
        }
        case "ToolCall":
          if (matched !== undefined) return []
          called = true
          return [event]
        case "Finish": {
          const rest = matcher.flush()
          const finish: ModelEvent =
            matched !== undefined ? { _tag: "Finish", reason: called ? "tool_calls" : "stop" } : event
          return rest === "" ? [finish] : [{ _tag: "TextDelta", text: rest }, finish]
        }
        default:
          return [event]
      }
    },
    matched: () => (called ? undefined : matched)
  }
}
