import { fileHarness, memoryHarness } from "../support/journals.js"
import { journalContract } from "./Journal.contract.js"

journalContract("memory", memoryHarness)
journalContract("file", fileHarness())
