// The idiomatic Swift API over the generated bindings (module StatelmFFI, written by
// crates/bindgen from crates/ffi/src/mobile.rs): async/await, AsyncThrowingStream, typed
// errors (StatelmError), and the OS's signals wired by the package (OSHooks).
//
// NOT BUILT HERE: the machine this project is developed and tested on has no Swift toolchain.
// The generated StatelmFFI.swift comes from UniFFI's generator, which is tested upstream on
// Swift toolchains; this file is not compiled by CI. The same API on the JVM (Kotlin) is
// compiled and run against the real library in CI (crates/bindgen/tests/kotlin.rs).
import Foundation
import StatelmFFI
#if canImport(UIKit)
import UIKit
#endif

/// A model and its engine.
public final class StatelmEngine: @unchecked Sendable {
    public let ffi: Engine
    private var hooks: OSHooks?

    /// The device's tier as JSON (`quant`: the weights file to fetch, `token_budget`, ...).
    public static func tier() throws -> String { try deviceTierJson() }

    /// Loads the model and starts an engine; with `wireOSHooks` (default) memory warnings,
    /// background/foreground and thermal states reach the engine with no app code.
    public init(modelPath: String, config: String? = nil, wireOSHooks: Bool = true) throws {
        ffi = try Engine(modelPath: modelPath, loadJson: nil, configJson: config)
        if wireOSHooks { hooks = OSHooks(engine: ffi) }
    }

    /// A new conversation.
    public func newSession(options: String? = nil) async throws -> ChatSession {
        ChatSession(try await ffi.newSession(optionsJson: options))
    }

    /// The durable conversation `name`, resumed from its files after a restart or a kill.
    public func openSession(_ name: String, options: String? = nil) async throws -> ChatSession {
        ChatSession(try await ffi.openSession(name: name, optionsJson: options))
    }

    /// The engine's figures as JSON.
    public func stats() async -> String { await ffi.statsJson() }
}

/// One conversation.
public final class ChatSession: @unchecked Sendable {
    public let ffi: Session
    init(_ ffi: Session) { self.ffi = ffi }

    /// The answer's events: tokens, memory events with their reasons, tool calls, `done`.
    /// Cancelling the consuming task cancels the generation.
    public func stream(_ input: String, params: String? = nil)
        -> AsyncThrowingStream<GenerationEvent, Error>
    {
        let session = ffi
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let generation = try await session.generate(inputJson: input, paramsJson: params)
                    try await withTaskCancellationHandler {
                        while let event = try await generation.next() {
                            continuation.yield(event)
                        }
                    } onCancel: {
                        generation.cancel()
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The whole answer's text.
    public func respond(_ input: String, params: String? = nil) async throws -> String {
        var text = ""
        for try await event in stream(input, params: params) {
            switch event {
            case let .token(_, piece): text += piece
            case let .text(piece): text += piece
            default: break
            }
        }
        return text
    }

    /// `{"user_turn": text}`.
    public static func userTurn(_ text: String) -> String {
        let data = try? JSONSerialization.data(withJSONObject: ["user_turn": text])
        return data.flatMap { String(data: $0, encoding: .utf8) } ?? "{}"
    }
}

/// The OS's signals, wired to the engine by the package: memory warnings and the dispatch
/// memory-pressure source, background/foreground, and the thermal state.
final class OSHooks {
    private var observers: [NSObjectProtocol] = []
    private let pressure: DispatchSourceMemoryPressure

    init(engine: Engine) {
        let center = NotificationCenter.default
        #if canImport(UIKit)
        observers.append(center.addObserver(
            forName: UIApplication.didReceiveMemoryWarningNotification, object: nil, queue: nil
        ) { _ in engine.memoryWarning(level: .warning) })
        observers.append(center.addObserver(
            forName: UIApplication.didEnterBackgroundNotification, object: nil, queue: nil
        ) { _ in engine.appState(state: .background) })
        observers.append(center.addObserver(
            forName: UIApplication.willEnterForegroundNotification, object: nil, queue: nil
        ) { _ in engine.appState(state: .foreground) })
        #endif
        observers.append(center.addObserver(
            forName: ProcessInfo.thermalStateDidChangeNotification, object: nil, queue: nil
        ) { _ in engine.thermalState(state: OSHooks.thermal()) })
        engine.thermalState(state: OSHooks.thermal())
        pressure = DispatchSource.makeMemoryPressureSource(eventMask: [.warning, .critical, .normal])
        pressure.setEventHandler { [pressure] in
            let event = pressure.data
            if event.contains(.critical) {
                engine.memoryWarning(level: .critical)
            } else if event.contains(.warning) {
                engine.memoryWarning(level: .warning)
            } else {
                engine.memoryWarning(level: .normal)
            }
        }
        pressure.activate()
    }

    static func thermal() -> ThermalState {
        switch ProcessInfo.processInfo.thermalState {
        case .nominal: return .nominal
        case .fair: return .fair
        case .serious: return .serious
        case .critical: return .critical
        @unknown default: return .serious
        }
    }

    deinit {
        observers.forEach(NotificationCenter.default.removeObserver)
        pressure.cancel()
    }
}
