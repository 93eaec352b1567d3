// The idiomatic Kotlin API over the generated bindings (package statelm.ffi, written by
// crates/bindgen from crates/ffi/src/mobile.rs): coroutines and Flow, typed errors, and the
// OS's signals mapped to the engine's (OsSignals). Options, inputs and params are the C ABI's
// JSON (docs/c-abi.md); helpers below build the common ones.
package statelm

import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.flow
import statelm.ffi.AppState
import statelm.ffi.GenerationEvent
import statelm.ffi.MemoryLevel
import statelm.ffi.Session as FfiSession
import statelm.ffi.StatelmException
import statelm.ffi.ThermalState

/** A model and its engine. Close it to stop the engine (sessions' spill files go with it). */
class Engine private constructor(private val engine: statelm.ffi.Engine) : AutoCloseable {
    companion object {
        /**
         * The device's tier as JSON: `quant` (which weights file to fetch: q8_0 or q4),
         * `token_budget`, `kv_type` and the memory figures. Decide before loading anything.
         */
        @Throws(StatelmException::class)
        fun tier(): String = statelm.ffi.deviceTierJson()

        /** Loads [modelPath] and starts an engine (`config`: the C ABI's engine config JSON). */
        @Throws(StatelmException::class)
        fun load(modelPath: String, config: String? = null, loadOptions: String? = null): Engine =
            Engine(statelm.ffi.Engine(modelPath, loadOptions, config))
    }

    /** A new conversation (`options`: `{"token_budget": ..., "system_prompt": ...}`). */
    suspend fun newSession(options: String? = null): Session = Session(engine.newSession(options))

    /** The durable conversation [name]: resumed from its files (after a restart or a kill). */
    suspend fun openSession(name: String, options: String? = null): Session =
        Session(engine.openSession(name, options))

    /** Forwards a memory warning (OsSignals does this from the OS's own callbacks). */
    fun memoryWarning(level: MemoryLevel) = engine.memoryWarning(level)

    /** The app went to the background or came back. */
    fun appState(state: AppState) = engine.appState(state)

    /** The device's thermal state. */
    fun thermalState(state: ThermalState) = engine.thermalState(state)

    /** The engine's figures as JSON (sessions, spills, `threads`, `thermal`, `lifecycle`). */
    suspend fun stats(): String = engine.statsJson()

    override fun close() = engine.close()
}

/** One conversation. */
class Session internal constructor(private val session: FfiSession) : AutoCloseable {
    /** The session's id in its engine. */
    val id: ULong get() = session.id()

    /**
     * Streams the answer to [input] (the C ABI's input JSON; see [userTurn], [messages]):
     * tokens, memory events (trimmed, evicted, spilled, restored: each with its reason), tool
     * calls, and `Done` last. Cancelling the collecting coroutine cancels the generation.
     */
    fun stream(input: String, params: String? = null): Flow<GenerationEvent> = flow {
        val generation = session.generate(input, params)
        try {
            while (true) {
                val event = generation.next() ?: break
                emit(event)
            }
        } finally {
            generation.cancel() // a finished one ignores it
            generation.close()
        }
    }

    /** The whole answer's text (tokens and released text; thinking and tool calls left out). */
    suspend fun respond(input: String, params: String? = null): String {
        val text = StringBuilder()
        stream(input, params).collect { e ->
            when (e) {
                is GenerationEvent.Token -> text.append(e.text)
                is GenerationEvent.Text -> text.append(e.text)
                else -> {}
            }
        }
        return text.toString()
    }

    /** Closes the session (a durable one keeps its files). */
    suspend fun closeSession() = session.closeSession()

    override fun close() = session.close()
}

/** `{"user_turn": text}`: one more user message in the session's conversation. */
fun userTurn(text: String): String = "{\"user_turn\": ${json(text)}}"

/** `{"messages": [...]}` from (role, content) pairs. */
fun messages(vararg turns: Pair<String, String>): String =
    turns.joinToString(", ", "{\"messages\": [", "]}") {
        "{\"role\": ${json(it.first)}, \"content\": ${json(it.second)}}"
    }

/** [s] as a JSON string. */
fun json(s: String): String {
    val out = StringBuilder("\"")
    for (c in s) {
        when {
            c == '"' -> out.append("\\\"")
            c == '\\' -> out.append("\\\\")
            c == '\n' -> out.append("\\n")
            c == '\r' -> out.append("\\r")
            c == '\t' -> out.append("\\t")
            c < ' ' -> out.append(String.format("\\u%04x", c.code))
            else -> out.append(c)
        }
    }
    return out.append('"').toString()
}

/**
 * The OS's signals in Android's terms, mapped to the engine's: the package's Android glue
 * (android/StatelmAndroid.kt) calls these from ComponentCallbacks2, the process lifecycle and
 * PowerManager; they are plain functions so the mapping is tested on the JVM.
 */
class OsSignals(private val engine: Engine) {
    /** ComponentCallbacks2.onTrimMemory(level). */
    fun onTrimMemory(level: Int) {
        when {
            // TRIM_MEMORY_COMPLETE (80), MODERATE (60), BACKGROUND (40), RUNNING_CRITICAL (15):
            // the process is near the top of the kill list.
            level >= 40 || level == 15 -> engine.memoryWarning(MemoryLevel.CRITICAL)
            // RUNNING_LOW (10), RUNNING_MODERATE (5).
            level >= 5 && level < 20 -> engine.memoryWarning(MemoryLevel.WARNING)
            // UI_HIDDEN (20) is the lifecycle's business, not memory's.
            else -> {}
        }
    }

    /** ComponentCallbacks.onLowMemory(). */
    fun onLowMemory() = engine.memoryWarning(MemoryLevel.CRITICAL)

    /** The process lifecycle's ON_STOP: the app left the screen. */
    fun onStop() = engine.appState(AppState.BACKGROUND)

    /** The process lifecycle's ON_START. */
    fun onStart() = engine.appState(AppState.FOREGROUND)

    /** PowerManager's thermal status (THERMAL_STATUS_NONE 0 ... SHUTDOWN 6). */
    fun onThermalStatus(status: Int) = engine.thermalState(
        when (status) {
            0 -> ThermalState.NOMINAL
            1 -> ThermalState.FAIR
            2, 3 -> ThermalState.SERIOUS
            else -> ThermalState.CRITICAL
        }
    )
}
