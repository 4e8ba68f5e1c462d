"""``privacy.core``: masking what goes to the model, restoring tokens on the way to tools, stored tokens, the
stream. Real detectors, the in-memory vault and a real sealer; no engine."""

from __future__ import annotations

import anyio
import pytest

from mcp_code_mode.governance import PiiPolicy
from mcp_code_mode.privacy.config import PrivacyConfig
from mcp_code_mode.privacy.core import Privacy, RunPrivacy
from mcp_code_mode.privacy.seal import Sealer
from mcp_code_mode.privacy.vault import MemoryVault, Vault

ALICE = "alice.liddell@example.com"
BOB = "bob.builder@example.org"
CARD = "4111 1111 1111 1111"
PHONE = "+1 415-555-0132"
SECRET = "sk_live_51HxYzAbCdEfGhIjKlMnOpQr"


def book(
    *,
    tokenize: dict[str, bool] | None = None,
    sinks: dict[str, dict[str, list[str]]] | None = None,
    secrets: tuple[str, ...] = (SECRET,),
    sealer: Sealer | None = None,
    vault: Vault | None = None,
    config: PrivacyConfig | None = None,
) -> Privacy:
    rules = {name: PiiPolicy.model_validate({"sinks": s}).kinds_for for name, s in (sinks or {}).items()}
    return Privacy(
        config=config or PrivacyConfig(),
        tokenize=tokenize if tokenize is not None else {"crm": True, "mail": False, "wiki": False},
        sinks=rules,
        secrets=secrets,
        vault=vault or MemoryVault(),
        sealer=sealer or Sealer.ephemeral(),
    )


def crm_rows() -> list[dict[str, str]]:
    return [{"email": ALICE, "card": CARD, "phone": PHONE}, {"email": BOB}]


def test_output_shows_tokens_the_same_for_the_same_value() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", crm_rows())
    text = run.mask_text(f"{ALICE} paid with {CARD}; again {ALICE}; call {PHONE}; {BOB}")
    assert text == "[EMAIL_1] paid with [CARD_1]; again [EMAIL_1]; call [PHONE_1]; [EMAIL_2]"


def test_secrets_are_replaced_even_with_personal_data_off() -> None:
    run = book(tokenize={"crm": False}).run("c1", tenant="default")
    assert not run.book.active
    text = run.mask_text(f"key={SECRET} mail {ALICE} and Bearer abcdefghijklmnopqrstuvwxyz0123")
    assert SECRET not in text and "abcdefghijklmnopqrstuvwxyz0123" not in text
    assert text.count("[SECRET]") == 2
    assert ALICE in text  # personal data is not tokenized when no server asks for it


def test_an_off_servers_values_stay_plain_unless_a_tokenizing_server_carried_them() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("wiki", {"author": "carol@example.net", "also": ALICE})
    run.harvest("crm", {"email": ALICE})
    text = run.mask_text(f"carol@example.net {ALICE} dave@example.net")
    assert text.startswith("carol@example.net [EMAIL_1] ")
    assert "dave@example.net" not in text  # from nowhere known (the network, the script): tokenized


def test_restored_value_is_masked_when_an_off_server_echoes_it() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", {"email": ALICE})
    token = run.mask_text(ALICE)
    later = book_run_again(run)
    args, note = later.restore("mail", "send_mail", {"to": token})
    assert args == {"to": token} and note.withheld == ("email",)  # mail may not receive it by default
    sinks = book(sinks={"mail": {"send_*": ["email"]}}, vault=run.book.vault).run("c1", tenant="default")
    args, note = sinks.restore("mail", "send_mail", {"to": token})
    assert args == {"to": ALICE} and note.restored == ("email",)
    sinks.harvest("mail", {"sent": True, "to": ALICE})  # an off server echoes the real value
    assert sinks.mask_text(f"sent to {ALICE}") == f"sent to {token}"


def book_run_again(run: RunPrivacy) -> RunPrivacy:
    """A later run of the same client against the same vault."""
    return run.book.run(run.client, tenant="default")


def test_restore_everywhere_in_the_arguments() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", crm_rows())
    t_alice, t_bob = run.mask_text(ALICE), run.mask_text(BOB)
    args, note = book_run_again(run).restore(
        "crm",
        "query",
        {
            "sql": f"SELECT * FROM customers WHERE email = '{t_alice}' OR email = '{t_bob}'",
            "nested": [{"to": [t_alice]}],
            t_bob: "as a key",
            "count": 3,
        },
    )
    assert args == {
        "sql": f"SELECT * FROM customers WHERE email = '{ALICE}' OR email = '{BOB}'",
        "nested": [{"to": [ALICE]}],
        BOB: "as a key",
        "count": 3,
    }
    assert note.restored == ("email",) and not note.withheld


def test_sinks_decide_per_tool_and_kind() -> None:
    privacy = book(sinks={"mail": {"send_mail": ["email"], "post_*": []}, "crm": {"export": []}})
    run = privacy.run("c1", tenant="default")
    run.harvest("crm", crm_rows())
    t_alice, t_card = run.mask_text(ALICE), run.mask_text(CARD)
    body = f"to {t_alice}, card {t_card}"
    args, note = run.restore("mail", "send_mail", {"body": body})
    assert args == {"body": f"to {ALICE}, card {t_card}"}
    assert note.restored == ("email",) and note.withheld == ("card",)
    args, note = run.restore("mail", "post_public", {"text": body})
    assert args == {"text": body} and note.withheld == ("card", "email")
    args, note = run.restore("crm", "export", {"text": body})  # its own server, but its entry says none
    assert args == {"text": body} and note.withheld == ("card", "email")
    args, _ = run.restore("crm", "get_customer", {"email": t_alice})  # no entry: its own server's values
    assert args == {"email": ALICE}


def test_secrets_and_unknown_tokens_are_never_restored() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", crm_rows())
    assert run.mask_text(SECRET) == "[SECRET]"
    args, note = run.restore("crm", "query", {"a": "[SECRET]", "b": "[EMAIL_99]", "c": "[EMAIL_1"})
    assert args == {"a": "[SECRET]", "b": "[EMAIL_99]", "c": "[EMAIL_1"}
    assert note.unknown == 1 and not note.restored


def test_clients_are_unrelated() -> None:
    privacy = book()
    a, b = privacy.run("a", tenant="default"), privacy.run("b", tenant="default")
    a.harvest("crm", {"email": ALICE})
    b.harvest("crm", {"email": BOB})
    assert a.mask_text(ALICE) == "[EMAIL_1]" and b.mask_text(BOB) == "[EMAIL_1]"
    args, _ = b.restore("crm", "get_customer", {"email": "[EMAIL_1]"})
    assert args == {"email": BOB}
    args, note = privacy.run("c", tenant="default").restore("crm", "get_customer", {"email": "[EMAIL_1]"})
    assert args == {"email": "[EMAIL_1]"} and note.unknown == 1


def test_json_values_numbers_keys_and_images() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", {"card": 4111111111111111})
    image = {"type": "image", "data": "QUxJQ0VAZXhhbXBsZS5jb20=" + ALICE, "mimeType": "image/png"}
    masked = run.mask({ALICE: [4111111111111111, 42, 3.5, True, None], "img": image})
    assert masked == {"[EMAIL_1]": ["[CARD_1]", 42, 3.5, True, None], "img": image}


def test_stored_tokens_are_given_anew_to_another_client() -> None:
    privacy = book()
    a = privacy.run("a", tenant="default")
    a.harvest("crm", crm_rows())
    a.mask_text(BOB)  # a's [EMAIL_1] is Bob
    output = a.mask_text(f"{ALICE} {CARD}")
    assert output == "[EMAIL_2] [CARD_1]"
    sealed = a.seal_tokens(output)
    assert sealed is not None and ALICE.encode() not in sealed
    b = privacy.run("b", tenant="default")
    shown = b.retokenize(sealed, output)
    assert shown == "[EMAIL_1] [CARD_1]"  # b's own numbering
    args, _ = b.restore("crm", "get_customer", {"email": "[EMAIL_1]"})
    assert args == {"email": ALICE}  # and b can use it: the value came from crm
    other_key = book(sealer=Sealer.ephemeral(), vault=privacy.vault).run("b", tenant="default")
    assert not other_key.readable(sealed)
    assert other_key.retokenize(sealed, output) == "[EMAIL] [CARD]"


def test_a_description_keeps_kinds_only() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", {"email": ALICE})
    assert run.described(f"mail {ALICE} about [EMAIL_1]") == "mail [EMAIL] about [EMAIL]"


def test_known_tokens_in_code() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", {"email": ALICE})
    run.mask_text(ALICE)
    assert run.known_tokens("crm.get_customer(email='[EMAIL_1]')")
    assert not run.known_tokens("crm.get_customer(email='[EMAIL_2]')")


@pytest.mark.anyio
async def test_a_stream_never_splits_a_value() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", crm_rows())
    sent: list[str] = []

    async def emit(text: str) -> None:
        sent.append(text)

    stream = run.stream(emit)
    line = f"customer {ALICE} card {CARD}\n"
    for i in range(0, len(line), 5):  # five characters at a time
        await stream.write(line[i : i + 5])
        await anyio.sleep(0)
    await stream.write(f"last {BOB}")
    await stream.flush()
    assert "".join(sent) == "customer [EMAIL_1] card [CARD_1]\nlast [EMAIL_2]"
    assert all("@" not in chunk for chunk in sent)


@pytest.mark.anyio
async def test_a_stream_lets_a_long_unbroken_run_go() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", {"email": ALICE})
    sent: list[str] = []

    async def emit(text: str) -> None:
        sent.append(text)

    stream = run.stream(emit)
    await stream.write(("word " * 2000) + ALICE)
    assert sent and ALICE not in "".join(sent)  # most went out; the tail with the value waits
    await stream.flush()
    assert "".join(sent).endswith("[EMAIL_1]")


def test_pem_block_is_one_secret() -> None:
    run = book().run("c1", tenant="default")
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\nabc\n-----END RSA PRIVATE KEY-----"
    assert run.mask_text(f"key:\n{pem}\ndone") == "key:\n[SECRET]\ndone"


def test_a_plain_value_from_a_tokenizing_server_goes_as_its_token_where_the_tool_may_not_receive_it() -> None:
    privacy = book(sinks={"mail": {"send_mail": ["email"]}})
    run = privacy.run("c1", tenant="default")
    run.harvest("crm", crm_rows())
    args, note = run.restore("mail", "post_public", {"text": f"contact {ALICE} or {BOB}"})
    assert args == {"text": "contact [EMAIL_1] or [EMAIL_2]"} and note.withheld == ("email",)
    args, note = run.restore("mail", "send_mail", {"to": ALICE})  # a sink: as the script wrote it
    assert args == {"to": ALICE} and not note
    args, note = run.restore("mail", "post_public", {"text": "write to carol@example.net"})  # the model's own
    assert args == {"text": "write to carol@example.net"} and not note
    later = privacy.run("c1", tenant="default")  # a later run: the vault remembers where the value came from
    args, _ = later.restore("mail", "post_public", {"text": ALICE})
    assert args == {"text": "[EMAIL_1]"}


def test_known_values_glued_to_other_text_are_their_tokens() -> None:
    run = book().run("c1", tenant="default")
    run.harvest("crm", {"email": BOB, "phone": PHONE})
    assert run.mask_text(f"{BOB}.txt backup-{BOB}.1 {PHONE}x12") == "[EMAIL_1].txt backup-[EMAIL_1].1 [PHONE_1]x12"
    assert run.mask_text(f"jim{BOB}") != f"jim{run.mask_text(BOB)}"  # part of a longer address: not this one
    assert BOB not in run.mask_text(f"jim{BOB}")


def test_cut_tail_drops_a_last_word_that_runs_to_the_cut() -> None:
    from mcp_code_mode.privacy.core import cut_tail

    assert cut_tail("customers: alice.mo") == "customers: …"
    assert cut_tail("done\n") == "done\n"
    assert cut_tail("x" * 300) == "x" * 44 + "…"


def test_a_cut_keeps_the_cap_unless_its_last_word_may_be_part_of_a_value_or_a_secret() -> None:
    quiet = book(tokenize={"crm": False}).run("c1", tenant="default")
    assert quiet.cut("abc\nxyzxyz") == "abc\nxyzxyz"  # nothing to hide: exactly the cap
    assert quiet.cut("key=sk_live_51HxY") == "…"  # the start of a known secret
    assert quiet.cut("token ghp_abc") == "token …"  # a key format's prefix
    assert book().run("c1", tenant="default").cut("customer alice.mo") == "customer …"  # personal data is tokenized


def test_a_field_named_for_a_kind_is_that_kind_whatever_its_shape() -> None:
    run = book().run("c1", tenant="default")
    run.harvest(
        "crm",
        {
            "rows": [
                {"Phone": "555-0199", "e-mail": "ops at example", "card_type": "visa", "IBAN": "XX00 1234 5678 9012 34"}
            ]
        },
    )
    out = run.mask_text("call 555-0199 card visa iban XX00 1234 5678 9012 34")
    assert out == "call [PHONE_1] card visa iban [IBAN_1]"  # "ops at example" has no @: not an address
    run.harvest("wiki", {"phone": "555-0123"})  # an off server's fields are not taken for its kind
    assert run.mask_text("555-0123") == "555-0123"


def test_scrub_replaces_secrets_only() -> None:
    privacy = book()
    assert privacy.scrub(f"401: bad key {SECRET} for {ALICE}") == f"401: bad key [SECRET] for {ALICE}"


def test_secret_named_fields_of_any_servers_results_are_secrets_even_with_personal_data_off() -> None:
    run = book(tokenize={"crm": False}).run("c1", tenant="default")
    run.harvest(
        "wiki",
        {
            "service": {"api_key": "k3y-0f-unkn0wn-f0rmat", "X-Auth-Token": "opaque.value.123"},
            "users": [{"password": "hunter2hunter2", "author": "Jane Smith-Jones", "max_tokens": "4096000000"}],
            "auth": {"Authorization": "Bearer abc.def.ghi.jkl"},
            "note": "short",
        },
    )
    text = run.mask_text(
        "k3y-0f-unkn0wn-f0rmat opaque.value.123 pw=hunter2hunter2 by Jane Smith-Jones 4096000000 abc.def.ghi.jkl"
    )
    assert text == "[SECRET] [SECRET] pw=[SECRET] by Jane Smith-Jones 4096000000 [SECRET]"


def test_texts_as_short_as_the_shortest_secret_are_still_scanned() -> None:
    """Without tokenizing, a text shorter than any secret can be (8 characters) skips the scan; one of 8 is
    scanned, so a secret-named field's 8-character value is [SECRET] even alone as an argument."""
    run = book(tokenize={"crm": False}).run("c1", tenant="default")
    run.harvest("wiki", {"password": "hunter22"})
    assert run.mask({"a": "hunter22", "b": 7, "hunter22": "x"}) == {"a": "[SECRET]", "b": 7, "[SECRET]": "x"}
    assert run.mask_text("hunter2") == "hunter2"
