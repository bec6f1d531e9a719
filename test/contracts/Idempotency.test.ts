import { Effect, Layer } from "effect"
import * as IdempotencyFile from "../../src/layers/IdempotencyFile.js"
import * as IdempotencyMemory from "../../src/layers/IdempotencyMemory.js"
import { FileDriver, nodeDriver } from "../../src/layers/journal/FileDriver.js"
import { tempDir } from "../support/journals.js"
import { idempotencyContract } from "./Idempotency.contract.js"
import { idempotencyBoundContract } from "./IdempotencyBound.contract.js"

const file = (options: Parameters<typeof IdempotencyMemory.make>[0]) =>
  Effect.flatMap(tempDir("brain-idem-"), (dataDir) =>
    IdempotencyFile.make({ dataDir, ...options }).pipe(Effect.provide(Layer.succeed(FileDriver, nodeDriver))))

idempotencyContract("memory", IdempotencyMemory.make)
idempotencyContract("file", file)
idempotencyBoundContract("memory", IdempotencyMemory.make)
idempotencyBoundContract("file", file)
