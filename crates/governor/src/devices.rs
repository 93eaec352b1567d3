//! The device list, kept as data (`data/devices.json`, embedded at build time).

use serde::Deserialize;

/// The operating system family of a listed device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// iOS: jetsam kills apps over their memory limit.
    Ios,
    /// Android: the low-memory killer (lmkd) decides.
    Android,
    /// Linux boards and servers: the cgroup limit or the global OOM killer.
    Linux,
    /// Desktop or laptop OSes: no hard per-app limit, swap instead.
    Desktop,
}

/// One device tier: RAM and the per-app memory ceiling we assume for it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct DeviceSpec {
    /// Stable id (e.g. `"iphone-15-pro"`), accepted by `STATELM_DEVICE`.
    pub id: String,
    /// Human name.
    pub name: String,
    /// OS family.
    pub platform: Platform,
    /// Physical RAM in bytes.
    #[serde(deserialize_with = "de_bytes")]
    pub ram: u64,
    /// Assumed memory one app may use before the OS kills it, in bytes.
    #[serde(deserialize_with = "de_bytes")]
    pub app_ceiling: u64,
    /// Where the ceiling comes from: the assumption and its basis.
    pub note: String,
}

#[derive(Deserialize)]
struct DeviceFile {
    devices: Vec<DeviceSpec>,
}

fn de_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    crate::parse_bytes(&text).map_err(serde::de::Error::custom)
}

const DEVICES_JSON: &str = include_str!("../data/devices.json");

/// All listed devices, in file order. The embedded list is checked by tests, so
/// this cannot fail at run time; a corrupt build yields an empty list and a log.
pub fn devices() -> Vec<DeviceSpec> {
    match serde_json::from_str::<DeviceFile>(DEVICES_JSON) {
        Ok(file) => file.devices,
        Err(e) => {
            tracing::error!(error = %e, "embedded devices.json is invalid");
            Vec::new()
        }
    }
}

/// The listed device with this id.
pub fn device(id: &str) -> Option<DeviceSpec> {
    devices().into_iter().find(|d| d.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_list_is_valid() {
        let file: DeviceFile = serde_json::from_str(DEVICES_JSON).unwrap();
        let list = file.devices;
        assert!(list.len() >= 13);
        let mut ids: Vec<_> = list.iter().map(|d| d.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), list.len(), "duplicate ids");
        for d in &list {
            assert!(d.app_ceiling > 0 && d.app_ceiling <= d.ram, "{d:?}");
            assert!(d.note.len() > 20, "{} needs a note", d.id);
        }
        let pro = device("iphone-15-pro").unwrap();
        assert_eq!(pro.ram, 8 << 30);
        assert_eq!(pro.platform, Platform::Ios);
        assert_eq!(device("pixel-8").unwrap().app_ceiling, 3584 << 20);
        assert!(device("nope").is_none());
    }
}
