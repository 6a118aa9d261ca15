//! `[decisions]`: the decision service's section of the config.

use serde::Deserialize;

/// `[decisions]`: the decision service (SPEC §7), served on the receivers' addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DecisionsConfig {
    /// Allow retries the rules cannot audit (fail open). Off by default: the seed's envelope
    /// fails closed, refusing what it cannot price.
    pub allow_unaudited: bool,
}
