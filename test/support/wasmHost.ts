/**
 * What the WasmHost tests that drive `runLoop` directly share: an activation input, a Host whose
 * methods die unless a test gives them, and admitting a module written as WAT.
 */
import { Effect } from "effect"
import type { ActivationInput, Host } from "../../src/services/Agentloop.js"
import type { WasmHostShape } from "../../src/services/WasmHost.js"
import { wat } from "./wat.js"

/** An activation input carrying `message`, with an empty transcript. */
export const activationInput = (message = "go"): ActivationInput => ({
  input: { message },
  transcript: [],
  configuration: { agentloop: "wasm", model: { provider: "scripted" } },
  events: [],
  runtime: { session_id: "ses_0000000000test0000000000", turn: 1, activation: 2, now_ms: 1_767_225_600_000, seed: 1 }
})

const unused = () => Effect.die("not used by this test")

/** A Host whose methods the test does not expect, except those given (telemetry is accepted). */
export const hostWith = (methods: Partial<Host>): Host => ({
  model: unused,
  dispatch: unused,
  emit: unused,
  telemetry: () => Effect.void,
  kvRead: unused,
  kvPut: unused,
  kvDelete: unused,
  setTranscript: unused,
  setTranscriptAtEnd: unused,
  events: unused,
  refusal: () => undefined,
  ...methods
})

/** Admits a module written as WAT; a refusal is a defect of the test. */
export const admit = (host: WasmHostShape, text: string) => Effect.flatMap(Effect.promise(() => wat(text)), (bytes) => Effect.orDie(host.admit(bytes)))
