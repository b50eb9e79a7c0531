//! NATS decentralized authentication for tests: an operator, its system account, an account with JetStream and
//! one without, in the form nats-server's operator mode takes them (JWTs signed with nkeys, given to a `resolver: MEMORY` by
//! `resolver_preload`), and users of that account as `.creds` files in the format `nsc` writes.
//!
//! ```
//! use outbox_tests::nats_operator::NatsOperator;
//!
//! let operator = NatsOperator::generate();
//! assert!(operator.server_config().contains("resolver: MEMORY"));
//! let relay = operator.user("relay");
//! assert!(relay.creds().starts_with("-----BEGIN NATS USER JWT-----\n"));
//! // A user of an account this operator signed but never gave the server: refused when it connects.
//! let stranger = operator.user_of_an_unknown_account("stranger");
//! assert_ne!(stranger.jwt, relay.jwt);
//! // A user of an account the server knows, but whose JWT grants it no JetStream.
//! let plain = operator.user_without_jetstream("plain");
//! assert_ne!(plain.jwt, relay.jwt);
//! ```

use std::fmt;
use std::path::Path;

use nats_jwt_rs::account::{Account, JetStreamLimits, OperatorLimits};
use nats_jwt_rs::operator::Operator;
use nats_jwt_rs::types::NO_LIMIT;
use nats_jwt_rs::user::User;
use nkeys::KeyPair;

/// An operator with a system account, an account `OUTBOX` whose JetStream limits are all unlimited (-1), and an
/// account `PLAIN` without JetStream, for [`Security::operator`](crate::brokers::Security::operator). Its `Debug`
/// shows public keys only.
#[derive(Clone)]
pub struct NatsOperator {
    operator_jwt: String,
    system_account: String,
    system_jwt: String,
    account: String,
    account_jwt: String,
    /// The account's seed, which signs its users.
    account_seed: String,
    /// The account `PLAIN`, which has no JetStream.
    plain_account: String,
    plain_account_jwt: String,
    plain_account_seed: String,
}

/// A user's JWT and nkey seed: what a `.creds` file holds.
#[derive(Clone)]
pub struct UserCredentials {
    /// The user JWT, signed by its account.
    pub jwt: String,
    /// The user's nkey seed (`SU...`), which signs the server's nonce.
    pub seed: String,
}

impl NatsOperator {
    /// Generates the operator (self-signed), its system account `SYS`, the account `OUTBOX` and the account
    /// `PLAIN` (all signed by the operator).
    ///
    /// # Panics
    ///
    /// When a JWT cannot be signed (never with keys generated here).
    #[must_use]
    pub fn generate() -> Self {
        let operator = KeyPair::new_operator();
        let system = KeyPair::new_account();
        let account = KeyPair::new_account();
        let plain = KeyPair::new_account();

        let mut operator_claims = Operator::new_claims("outbox-test".to_owned(), operator.public_key());
        operator_claims.nats.system_account = Some(system.public_key());
        let operator_jwt = operator_claims.encode(&operator).expect("sign the operator JWT");

        // The system account has the default limits (-1) and no JetStream, as nats-server requires.
        let system_claims = Account::new_claims("SYS".to_owned(), system.public_key());
        let system_jwt = system_claims.encode(&operator).expect("sign the system account JWT");

        Self {
            operator_jwt,
            system_account: system.public_key(),
            system_jwt,
            account: account.public_key(),
            account_jwt: jetstream_account_jwt("OUTBOX", &account, &operator),
            account_seed: account.seed().expect("an account seed"),
            plain_account: plain.public_key(),
            // No JetStream limits: the server has JetStream, this account may not use it.
            plain_account_jwt: Account::new_claims("PLAIN".to_owned(), plain.public_key())
                .encode(&operator)
                .expect("sign the account JWT"),
            plain_account_seed: plain.seed().expect("an account seed"),
        }
    }

    /// The public key (`A...`) of the account `OUTBOX`, whose users [`user`](Self::user) makes.
    #[must_use]
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The lines of `nats.conf` that put the server in operator mode: `operator` (the operator JWT),
    /// `system_account`, `resolver: MEMORY` and `resolver_preload` with the JWTs of the three accounts.
    #[must_use]
    pub fn server_config(&self) -> String {
        format!(
            "operator: {:?}\nsystem_account: {}\nresolver: MEMORY\nresolver_preload: {{\n  {}: {:?}\n  {}: {:?}\n  {}: {:?}\n}}\n",
            self.operator_jwt,
            self.system_account,
            self.system_account,
            self.system_jwt,
            self.account,
            self.account_jwt,
            self.plain_account,
            self.plain_account_jwt
        )
    }

    /// A new user `name` of the account `OUTBOX`, with no limits and every permission.
    ///
    /// # Panics
    ///
    /// When the JWT cannot be signed (never with keys generated here).
    #[must_use]
    pub fn user(&self, name: &str) -> UserCredentials {
        let account = KeyPair::from_seed(&self.account_seed).expect("the account seed");
        user_of(name, &account)
    }

    /// A new user `name` of the account `PLAIN`, which the server knows but whose JWT has no JetStream limits:
    /// the user connects, and every JetStream request is answered "JetStream not enabled for account".
    ///
    /// # Panics
    ///
    /// When the JWT cannot be signed (never with keys generated here).
    #[must_use]
    pub fn user_without_jetstream(&self, name: &str) -> UserCredentials {
        let account = KeyPair::from_seed(&self.plain_account_seed).expect("the account seed");
        user_of(name, &account)
    }

    /// A new user `name` of an account that this operator signed but that the server was never given: the
    /// server cannot resolve its account and refuses it.
    ///
    /// # Panics
    ///
    /// When a JWT cannot be signed (never with keys generated here).
    #[must_use]
    pub fn user_of_an_unknown_account(&self, name: &str) -> UserCredentials {
        user_of(name, &KeyPair::new_account())
    }
}

impl fmt::Debug for NatsOperator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsOperator")
            .field("system_account", &self.system_account)
            .field("account", &self.account)
            .field("plain_account", &self.plain_account)
            .finish_non_exhaustive()
    }
}

impl UserCredentials {
    /// The content of a `.creds` file, as `nsc` writes it: the JWT and the seed between their armour lines.
    #[must_use]
    pub fn creds(&self) -> String {
        format!(
            "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n",
            self.jwt, self.seed
        )
    }

    /// Writes [`creds`](Self::creds) to `path`.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.creds()).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
}

impl fmt::Debug for UserCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UserCredentials([REDACTED])")
    }
}

/// The JWT of account `name` with every JetStream limit unlimited (-1), signed by `operator`.
fn jetstream_account_jwt(name: &str, account: &KeyPair, operator: &KeyPair) -> String {
    let mut claims = Account::new_claims(name.to_owned(), account.public_key());
    claims.nats.limits = Some(OperatorLimits {
        jetstream: Some(JetStreamLimits {
            memory_storage: Some(NO_LIMIT),
            disk_storage: Some(NO_LIMIT),
            streams: Some(NO_LIMIT),
            consumer: Some(NO_LIMIT),
            max_ack_pending: Some(NO_LIMIT),
            ..JetStreamLimits::default()
        }),
        ..OperatorLimits::default()
    });
    claims.encode(operator).expect("sign the account JWT")
}

/// A new user `name` signed by `account` (its issuer, so no `issuer_account`).
fn user_of(name: &str, account: &KeyPair) -> UserCredentials {
    let user = KeyPair::new_user();
    let jwt = User::new_claims(name.to_owned(), user.public_key()).encode(account).expect("sign the user JWT");
    UserCredentials { jwt, seed: user.seed().expect("a user seed") }
}
