// The Android glue: the OS's callbacks wired to the engine by the package, not by each app.
// NOT COMPILED HERE: it needs Android's android.jar, which this machine cannot fetch. The
// mapping it calls (statelm.OsSignals) is plain Kotlin, compiled and tested on the JVM by
// crates/bindgen/tests/kotlin.rs; this file only forwards the callbacks.
package statelm.android

import android.app.Activity
import android.app.Application
import android.content.ComponentCallbacks2
import android.content.Context
import android.content.res.Configuration
import android.os.Build
import android.os.Bundle
import android.os.PowerManager
import statelm.Engine
import statelm.OsSignals

/** Installs the hooks once, e.g. in Application.onCreate: `StatelmAndroid.install(this, engine)`. */
object StatelmAndroid {
    fun install(app: Application, engine: Engine) {
        val signals = OsSignals(engine)
        app.registerComponentCallbacks(object : ComponentCallbacks2 {
            override fun onTrimMemory(level: Int) = signals.onTrimMemory(level)
            override fun onLowMemory() = signals.onLowMemory()
            override fun onConfigurationChanged(newConfig: Configuration) {}
        })
        // The process is in the foreground while one of its activities is started (what
        // androidx's ProcessLifecycleOwner reports as ON_START/ON_STOP, without the dependency).
        app.registerActivityLifecycleCallbacks(object : Application.ActivityLifecycleCallbacks {
            private var started = 0
            override fun onActivityStarted(a: Activity) {
                if (started++ == 0) signals.onStart()
            }
            override fun onActivityStopped(a: Activity) {
                if (--started == 0) signals.onStop()
            }
            override fun onActivityCreated(a: Activity, b: Bundle?) {}
            override fun onActivityResumed(a: Activity) {}
            override fun onActivityPaused(a: Activity) {}
            override fun onActivitySaveInstanceState(a: Activity, b: Bundle) {}
            override fun onActivityDestroyed(a: Activity) {}
        })
        if (Build.VERSION.SDK_INT >= 29) {
            val power = app.getSystemService(Context.POWER_SERVICE) as PowerManager
            signals.onThermalStatus(power.currentThermalStatus)
            power.addThermalStatusListener { status -> signals.onThermalStatus(status) }
        }
    }
}
