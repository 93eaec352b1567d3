//! Who a request belongs to: the engine's [`Tenant`] (the index of the API key it presented and
//! its `user`), and the name of its durable conversation. The engine's session pool
//! ([`statelm_engine::PoolRequest`]) decides which session a request reuses.

pub(crate) use statelm_engine::Tenant;

/// The durable session name of `tenant`'s conversation: the `user` itself with at most one API
/// key (so existing session directories keep working), else prefixed by the key's position
/// (`k1-alice`) so that two keys' users never share a conversation.
pub(crate) fn durable_name(tenant: &Tenant, keys: usize) -> Option<String> {
    let user = tenant.user.as_deref()?;
    Some(match tenant.key {
        Some(k) if keys > 1 => format!("k{k}-{user}"),
        _ => user.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_names_are_per_key_with_several_keys() {
        let t = |key, user: &str| Tenant {
            key,
            user: Some(user.into()),
        };
        assert_eq!(durable_name(&t(Some(0), "bob"), 1).as_deref(), Some("bob"));
        assert_eq!(durable_name(&t(None, "bob"), 0).as_deref(), Some("bob"));
        assert_eq!(
            durable_name(&t(Some(1), "bob"), 2).as_deref(),
            Some("k1-bob")
        );
        assert_eq!(
            durable_name(&t(Some(0), "bob"), 2).as_deref(),
            Some("k0-bob")
        );
        assert_eq!(durable_name(&Tenant::default(), 2), None);
    }
}
