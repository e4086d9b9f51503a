import { Either } from "effect"

/**
 * Function calls carry no id in the Gemini-style protocol (spec 4.3). Each call in `contents` gets
 * the id the client sent or a generated one (`call_0`, `call_1`, ... in order), and each
 * `functionResponse` is paired with the call of the same id when the client sends one, else with
 * the earliest unanswered call of the same name before it. A response answering no call, or a call
 * no response answers, is refused naming the field.
 */

export interface PairingPart {
  readonly functionCall?: { readonly name: string; readonly id?: string }
  readonly functionResponse?: { readonly name: string; readonly id?: string }
}

export interface PairingContent {
  readonly parts: ReadonlyArray<PairingPart>
}

export interface Pairing {
  /** the id of the call at `contents.i.parts.j`, keyed `i.j` */
  readonly calls: ReadonlyMap<string, string>
  /** the call id each response at `contents.i.parts.j` answers, keyed `i.j` */
  readonly responses: ReadonlyMap<string, string>
}

export interface PairingRefusal {
  readonly field: string
  readonly message: string
}

export const pairCalls = (contents: ReadonlyArray<PairingContent>): Either.Either<Pairing, PairingRefusal> => {
  const calls = new Map<string, string>()
  const responses = new Map<string, string>()
  const open: Array<{ readonly key: string; readonly id: string; readonly name: string }> = []
  let next = 0
  for (let i = 0; i < contents.length; i++) {
    const parts = contents[i].parts
    for (let j = 0; j < parts.length; j++) {
      const key = `${i}.${j}`
      const call = parts[j].functionCall
      if (call !== undefined) {
        const id = call.id !== undefined && call.id !== "" ? call.id : `call_${next}`
        next++
        calls.set(key, id)
        open.push({ key, id, name: call.name })
        continue
      }
      const response = parts[j].functionResponse
      if (response === undefined) continue
      let at = response.id !== undefined && response.id !== "" ? open.findIndex((c) => c.id === response.id) : -1
      if (at < 0) at = open.findIndex((c) => c.name === response.name)
      if (at < 0) {
        return Either.left({ field: `contents.${i}.parts.${j}.functionResponse`, message: `answers no earlier unanswered functionCall named ${response.name}` })
      }
      responses.set(key, open[at].id)
      open.splice(at, 1)
    }
  }
  if (open.length > 0) {
    const [i, j] = open[0].key.split(".")
    return Either.left({ field: `contents.${i}.parts.${j}.functionCall`, message: `no functionResponse in contents answers the call to ${open[0].name}` })
  }
  return Either.right({ calls, responses })
}
