/**
 * Brain's services wired together, in one place. The server (main.ts) and the tests
 * (test/support/runtime.ts) both build from `sessionServices`, each naming only the parts that
 * differ between them: where journals and checkpoints are kept, the model provider, the
 * WebAssembly host and the loops it runs, what the base holds (bindings, hosts) and the services
 * beside Sessions (Environments, telemetry, the idempotency store). How those parts depend on one
 * another — which layer is given the journal, the Wasm host, the loops — is written once, so what
 * a test runs is wired as the server runs it and the two cannot drift.
 */
import { Layer } from "effect"
import * as EffectFenceJournal from "./layers/EffectFenceJournal.js"
import * as ProjectionCheckpointed from "./layers/ProjectionCheckpointed.js"
import * as SessionsJournal from "./layers/SessionsJournal.js"
import type { ToolHandler } from "./layers/ToolsInProcess.js"
import * as ToolsBuiltin from "./layers/ToolsBuiltin.js"
import type { CheckpointStore } from "./services/Projection.js"
import type { Agentloops } from "./services/Agentloop.js"
import type { Journal } from "./services/Journal.js"
import type { Models } from "./services/Models.js"
import { ServerConfig, type ServerConfigShape } from "./services/ServerConfig.js"

/**
 * The parts a composition chooses. `W`: the WebAssembly host (`WasmHost`, or nothing); `B`: what
 * the base holds besides the journal and the configuration (model and environment bindings,
 * hosts), which every other part may use; `X`: the services beside Sessions. `EJ` … `EX`: what
 * building each part can fail with, so that the composition's error is exactly their union.
 */
export interface Parts<W, B, X, EJ = never, EC = never, EB = never, EM = never, EW = never, EA = never, EX = never> {
  readonly config: ServerConfigShape
  readonly journal: Layer.Layer<Journal, EJ>
  readonly checkpoints: Layer.Layer<CheckpointStore, EC>
  /** Given the journal too: the host registry asks it whether a session still exists. */
  readonly base: Layer.Layer<B, EB, ServerConfig | Journal>
  readonly models: Layer.Layer<Models, EM, ServerConfig | B>
  readonly wasm: Layer.Layer<W, EW, ServerConfig>
  /** The loops: given the journal and the Wasm host (AgentloopsModules.layer). */
  readonly agentloops: Layer.Layer<Agentloops, EA, Journal | W>
  /** In-process tools, by name. */
  readonly tools: Readonly<Record<string, ToolHandler>>
  readonly beside: Layer.Layer<X, EX, ServerConfig | Journal | B>
}

/** Sessions and every service it runs on, from `parts`. */
export const sessionServices = <W, B, X, EJ, EC, EB, EM, EW, EA, EX>(parts: Parts<W, B, X, EJ, EC, EB, EM, EW, EA, EX>) => {
  const config = Layer.succeed(ServerConfig, parts.config)
  const base = Layer.mergeAll(parts.journal, config, parts.base.pipe(Layer.provide(Layer.merge(config, parts.journal))))
  const wasm = parts.wasm.pipe(Layer.provide(config))
  const agentloops = parts.agentloops.pipe(Layer.provide(Layer.merge(wasm, parts.journal)))
  const deps = Layer.mergeAll(
    ProjectionCheckpointed.layer.pipe(Layer.provide(parts.checkpoints)),
    EffectFenceJournal.layer,
    parts.models,
    ToolsBuiltin.layer(parts.tools).pipe(Layer.provide(Layer.merge(wasm, agentloops))),
    agentloops,
    wasm,
    parts.beside
  ).pipe(Layer.provideMerge(base))
  return SessionsJournal.layer.pipe(Layer.provideMerge(deps))
}
