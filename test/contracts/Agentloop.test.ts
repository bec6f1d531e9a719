import { Effect, Layer } from "effect"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"
import { agentloopHostContract } from "./Agentloop.contract.js"

agentloopHostContract("memory journal", (options) => runtimeLayer({ ...options, journal: "memory" }))
agentloopHostContract("file journal", (options) =>
  Layer.unwrapScoped(Effect.map(tempDir("brain-agentloop-"), (dataDir) => runtimeLayer({ ...options, journal: { dataDir } }))))
