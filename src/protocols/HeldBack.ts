import { Effect, Option } from "effect"
import { foldEvents, ModelEvent, type StructuredOutput } from "../domain/Canonical.js"
import type { GatewayError } from "../domain/Errors.js"
import { resolveStructured } from "../domain/Structured.js"
import { drainPull } from "../providers/Provider.js"
import { replayed, type EventPull, type StartedRun } from "../services/runner/ModelRunner.js"

/**
 * A structured answer streams as one piece: the run is read to its end and resolved (respond call,
 * or matching final text) before the response commits, so a missing answer is a real HTTP error;
 * the resolved answer then replays as reasoning (with its signature and redacted blocks), one text
 * delta, calls, usage and finish.
 */
export const holdStructured = (run: StartedRun, structured: StructuredOutput | undefined): Effect.Effect<StartedRun, GatewayError> => {
  if (structured === undefined) return Effect.succeed(run)
  return Effect.flatMap(drainPull(run.pull), (all) => {
    const resolved = resolveStructured(foldEvents(all), structured)
    if (resolved._tag === "error") return Effect.fail(resolved.error)
    const answer = resolved.result.answer
    const events: Array<ModelEvent> = []
    if (answer.reasoning !== "" || answer.reasoningSignature !== undefined) events.push(ModelEvent.reasoning(answer.reasoning, answer.reasoningSignature, answer.reasoningFamily))
    for (const data of answer.redacted) events.push(ModelEvent.redacted(data))
    if (answer.text !== "") events.push({ _tag: "TextDelta", text: answer.text })
    for (const call of answer.toolCalls) events.push({ _tag: "ToolCall", call })
    events.push({ _tag: "Usage", usage: answer.usage }, { _tag: "Finish", reason: answer.finishReason })
    return Effect.succeed(replayed(run, events))
  })
}

/**
 * The same hold on a stream that has committed at the run's first event (a protocol whose missing
 * structured answer is an error event in the stream, Messages): the first pull reads the run to its
 * end and resolves it, so a keep-alive around the pull fills the wait; it then fails with the
 * missing answer's error, or passes on the replayed answer.
 */
export const holdStructuredInStream = (run: StartedRun, structured: StructuredOutput): StartedRun => {
  let resolved: EventPull | undefined
  const pull: EventPull = Effect.suspend(() =>
    resolved !== undefined
      ? resolved
      : Effect.flatMap(Effect.mapError(holdStructured(run, structured), Option.some), (answer) => {
          resolved = answer.pull
          return answer.pull
        })
  )
  return { ...run, pull }
}
