//! `kiln keygen`: makes the keys of a fleet's remote tier (P10): a fleet
//! key every member holds, or a builder's signing key and the public key
//! nodes trust (docs/FLEET.md).

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use crate::console::{errln, outln};
use crate::output::Output;

/// `kiln keygen` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// An Ed25519 signing key for a build machine, and its public key for
    /// the nodes, instead of one fleet key.
    #[arg(long)]
    pub signing: bool,
}

/// What `kiln keygen --json` prints: secrets, to be kept as such.
#[derive(Debug, Serialize)]
struct Made {
    /// `fleet` or `signing`.
    kind: &'static str,
    /// The secret: `KILN_REMOTE_KEY` or `KILN_REMOTE_SIGNING_KEY`.
    secret: String,
    /// The public key for `KILN_REMOTE_TRUSTED_KEYS`, of a signing key.
    public: Option<String>,
}

/// Makes a key from the operating system's randomness and prints it once.
pub fn run(arguments: &Arguments, output: &Output) -> Result<()> {
    let made = if arguments.signing {
        let key = kiln_remote::keygen::signing_key()?;
        Made {
            kind: "signing",
            secret: key.secret_text(),
            public: Some(key.public_key().to_string()),
        }
    } else {
        Made {
            kind: "fleet",
            secret: kiln_remote::keygen::fleet_key()?.secret_text(),
            public: None,
        }
    };
    output.print(&made, || match &made.public {
        Some(public) => {
            outln!("KILN_REMOTE_SIGNING_KEY={}", made.secret);
            outln!("KILN_REMOTE_TRUSTED_KEYS={public}");
            errln!(
                "kiln: the signing key goes to build machines only; the public key to \
                     every node (`kiln push --help` says how they are used)"
            );
        }
        None => {
            outln!("KILN_REMOTE_KEY={}", made.secret);
            errln!(
                "kiln: a secret: give it to every machine of the fleet (a file whose path \
                     KILN_REMOTE_KEY names works too), never to anyone else"
            );
        }
    })
}
