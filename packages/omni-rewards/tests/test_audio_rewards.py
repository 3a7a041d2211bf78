"""Speech rewards: the waveform checks, the signal-level rewards (values worked out from
their formulas), the WAV wire format, and WeightedAudioReward built from specs."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import soundfile

from omni_rewards import (
    AUDIO_SCORERS,
    AudioRewardConfigError,
    AudioRewardError,
    InvalidSpeechSampleError,
    InvalidWaveformError,
    ScorerOutputError,
    ScorerRegistrationError,
    SpeechSample,
    UnknownAudioRewardError,
    WeightedAudioReward,
)
from omni_rewards.audio import (
    AudioScorerRegistry,
    check_waveform,
    clipped_fraction,
    clipping_reward,
    decode_wav_pcm16,
    duration_reward,
    encode_wav_pcm16,
    expected_duration_s,
    loudness_reward,
    rms_dbfs,
    run_audio_scorer,
    silence_ratio,
    silence_reward,
)
from omni_rewards.audio.signal import count_text_units

SR = 16000
FRAME = 320  # 20 ms at 16 kHz: the silence reward's default frame
SIX_WORDS = "the cat sat on the mat"


def tone(seconds: float, amplitude: float = 0.5, sample_rate: int = SR) -> np.ndarray:
    """A 440 Hz sine; over whole seconds it holds whole periods, so its RMS is amplitude/√2."""
    t = np.arange(round(seconds * sample_rate)) / sample_rate
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SR), np.float32)


def dc(level_dbfs: float, samples: int = SR) -> np.ndarray:
    """A constant signal: its RMS is the constant, so its level is exactly ``level_dbfs``."""
    return np.full(samples, 10 ** (level_dbfs / 20), np.float32)


# --- the waveform a scorer may rely on ---------------------------------------------------


@pytest.mark.parametrize(
    ("waveform", "sample_rate", "message"),
    [
        (np.zeros(0, np.float32), SR, "empty"),
        (np.array([0.1, np.nan, 0.2, np.inf], np.float32), SR, "2 NaN or infinite samples of 4"),
        (np.array([0.1, 1e300]), SR, "NaN or infinite"),  # float64 beyond float32's range
        (np.zeros((2, 100), np.float32), SR, r"1-D .* shape \(2, 100\)"),
        (np.zeros(100, np.int16), SR, "divide by 32768"),
        ([0.1, 0.2], SR, "numpy array, got list"),
        (np.zeros(100, np.float32), 0, "positive integer"),
        (np.zeros(100, np.float32), True, "positive integer"),
        (np.zeros(100, np.float32), 16000.0, "positive integer"),
    ],
)
def test_unscorable_waveforms_are_refused(waveform: object, sample_rate: object, message: str) -> None:
    with pytest.raises(InvalidWaveformError, match=message):
        check_waveform(waveform, sample_rate)


@pytest.mark.parametrize("reward", [duration_reward, silence_reward, clipping_reward, loudness_reward])
def test_every_signal_reward_refuses_a_broken_waveform(reward) -> None:
    broken = tone(1.0)
    broken[100] = np.nan
    with pytest.raises(InvalidWaveformError):
        reward(broken, SR, SIX_WORDS)
    with pytest.raises(InvalidWaveformError):
        reward(np.zeros(0, np.float32), SR, SIX_WORDS)


def test_float64_input_is_scored_as_float32() -> None:
    checked = check_waveform(np.array([0.25, -0.5]), SR)
    assert checked.dtype == np.float32 and checked.tolist() == [0.25, -0.5]


# --- duration ----------------------------------------------------------------------------


def test_text_units() -> None:
    assert count_text_units("Hello, world !") == 2  # "!" holds no letter: not a word
    assert count_text_units("Hello, world !", "chars") == 10
    assert count_text_units("你好，世界。", "chars") == 4
    # 6 words at the default 2.5 words/s; 4 characters at 4 characters/s
    assert expected_duration_s(SIX_WORDS) == pytest.approx(2.4)
    assert expected_duration_s("你好世界", unit="chars", units_per_s=4.0) == 1.0


@pytest.mark.parametrize(
    ("seconds", "expected_score"),
    [
        # 6 words at 2 words/s: 3.0 s expected. tolerance 0.25: ratios in [0.8, 1.25] score 1.
        (3.0, 1.0),
        (3.75, 1.0),  # ratio 1.25, the band's upper edge
        (2.4, 1.0),  # ratio 0.8, its lower edge
        # ratio 1.875 = 1.25 * 1.5: excess ln 1.5 = one falloff -> 2^-1
        (5.625, 0.5),
        # ratio 0.8 / 1.5 = 8/15: the same excess on the short side -> 2^-1
        (1.6, 0.5),
        # ratio 1.25 * 1.5^2 = 2.8125: two falloffs -> 2^-4
        (8.4375, 1 / 16),
    ],
)
def test_duration_against_the_text(seconds: float, expected_score: float) -> None:
    result = duration_reward(tone(seconds), SR, SIX_WORDS, units_per_s=2.0)
    assert result["score"] == pytest.approx(expected_score)
    assert result["duration_s"] == pytest.approx(seconds)
    assert result["expected_duration_s"] == 3.0


def test_duration_is_symmetric_in_ratio_and_falls_away_from_the_band() -> None:
    # text: 5 words at 2.5 words/s = 2.0 s; ratios r and 1/r score the same
    text = "one two three four five"
    for ratio in (1.5, 2.0, 3.0):
        long = duration_reward(tone(2.0 * ratio), SR, text)["score"]
        short = duration_reward(tone(2.0 / ratio), SR, text)["score"]
        assert long == pytest.approx(short, rel=1e-3)  # 1/r s is rounded to whole samples
    seconds = (2.0, 2.5, 3.0, 4.0, 6.0, 9.0)  # 2.5 s is ratio 1.25, the band's edge
    scores = [duration_reward(tone(s), SR, text)["score"] for s in seconds]
    assert scores[0] == scores[1] == 1.0
    assert all(a > b for a, b in zip(scores[1:], scores[2:], strict=False)), scores


def test_duration_needs_something_to_say() -> None:
    for text in ("", "   ", "... !"):
        with pytest.raises(InvalidSpeechSampleError, match="at least one word"):
            duration_reward(tone(1.0), SR, text)
    with pytest.raises(ValueError, match="falloff > 1"):
        duration_reward(tone(1.0), SR, SIX_WORDS, falloff=1.0)


# --- silence -----------------------------------------------------------------------------


def test_silence_ratio_counts_silent_frames_by_duration() -> None:
    half = np.concatenate([tone(1.0), silence(1.0)])  # 50 loud frames, 50 silent
    assert silence_ratio(half, SR) == 0.5
    assert silence_ratio(tone(1.0), SR) == 0.0
    assert silence_ratio(silence(1.0), SR) == 1.0
    # one full loud frame and a 10-sample silent tail frame: 10 of 330 samples
    assert silence_ratio(np.concatenate([tone(1.0)[:FRAME], np.zeros(10, np.float32)]), SR) == (
        10 / 330
    )


def test_silence_threshold_is_relative_to_the_peak_or_to_full_scale() -> None:
    quiet = tone(1.0, amplitude=0.005)  # RMS 0.0035: -49 dBFS
    assert silence_ratio(quiet, SR, reference="peak") == 0.0  # every frame is the peak's level
    assert silence_ratio(quiet, SR, reference="full_scale") == 1.0  # below -40 dBFS
    assert silence_ratio(quiet, SR, reference="full_scale", threshold_db=-60) == 0.0
    # peak-relative: a -50 dB-quieter half counts as silence at -40 dB, not at -60 dB
    steps = np.concatenate([tone(1.0, 0.5), tone(1.0, 0.5 * 10 ** (-50 / 20))])
    assert silence_ratio(steps, SR) == 0.5
    assert silence_ratio(steps, SR, threshold_db=-60) == 0.0


def test_silence_reward_values() -> None:
    # ratio 0.25 is within the allowance (0.3): 1
    assert silence_reward(np.concatenate([tone(0.75), silence(0.25)]), SR, "")["score"] == 1.0
    # ratio 0.5: (1 - 0.5) / (1 - 0.3) = 5/7
    result = silence_reward(np.concatenate([tone(1.0), silence(1.0)]), SR, "")
    assert result == {"score": pytest.approx(5 / 7), "silence_ratio": 0.5}
    assert silence_reward(silence(1.0), SR, "")["score"] == 0.0


def test_more_silence_scores_lower() -> None:
    speech = tone(1.0)
    scores = [
        silence_reward(np.concatenate([speech, silence(pad)]), SR, "")["score"]
        for pad in (0.0, 0.2, 0.6, 1.0, 2.0, 4.0, 9.0)
    ]
    assert scores[:2] == [1.0, 1.0]  # 0 and 1/6 silence: within the allowance
    assert all(a > b for a, b in zip(scores[1:], scores[2:], strict=False)), scores


# --- clipping ----------------------------------------------------------------------------


def test_clipped_fraction_counts_samples_at_or_beyond_full_scale() -> None:
    x = np.full(10_000, 0.1, np.float32)
    x[:20], x[20:40], x[40:50] = 1.0, -1.0, 1.5  # 50 at or beyond ±1
    x[50:60] = 0.998  # below the 0.999 threshold
    assert clipped_fraction(x) == 50 / 10_000
    # 0.5% clipped against the 1% limit: 1 - 0.005 / 0.01
    assert clipping_reward(x, SR, "") == {"score": pytest.approx(0.5), "clipped_fraction": 0.005}
    assert clipping_reward(tone(1.0), SR, "")["score"] == 1.0


def test_a_hard_clipped_sine_scores_zero() -> None:
    # 2·sin clipped to ±1 sits at full scale where |sin| >= 0.4995:
    # a fraction 1 - (2/π)·asin(0.4995) of the time, about 2/3
    clipped = np.clip(tone(1.0, amplitude=2.0), -1.0, 1.0)
    # (the sampled sine holds 36.4 samples a period: within half a percent)
    assert clipped_fraction(clipped) == pytest.approx(1 - 2 / math.pi * math.asin(0.4995), abs=5e-3)
    assert clipping_reward(clipped, SR, "")["score"] == 0.0


def test_more_clipping_scores_lower() -> None:
    scores = []
    for clipped in (0, 10, 40, 80, 100, 200):
        x = np.full(10_000, 0.1, np.float32)
        x[:clipped] = 1.0
        scores.append(clipping_reward(x, SR, "")["score"])
    # 1 - c / 1%: 1, 0.9, 0.6, 0.2, then 0 from the 1% limit on
    assert scores == pytest.approx([1.0, 0.9, 0.6, 0.2, 0.0, 0.0])


# --- loudness ----------------------------------------------------------------------------


def test_loudness_levels_and_scores() -> None:
    assert rms_dbfs(tone(1.0, amplitude=0.1)) == pytest.approx(20 * math.log10(0.1 / math.sqrt(2)))
    assert rms_dbfs(dc(-6.0)) == pytest.approx(-6.0, abs=1e-5)
    assert rms_dbfs(silence(1.0)) == -120.0
    # default window [-30, -12] dBFS, falloff 6 dB
    assert loudness_reward(tone(1.0, amplitude=0.1), SR, "")["score"] == 1.0  # -23 dB
    assert loudness_reward(dc(-6.0), SR, "")["score"] == pytest.approx(0.5, abs=1e-5)  # 6 dB over
    assert loudness_reward(dc(-42.0), SR, "")["score"] == pytest.approx(1 / 16, abs=1e-5)  # 12 under
    # digital silence: 90 dB under, 2^-225
    assert loudness_reward(silence(1.0), SR, "") == {"score": 2.0**-225, "rms_dbfs": -120.0}


def test_loudness_falls_away_from_the_window() -> None:
    levels = [-20.0, -14.0, -10.0, -6.0, -3.0]
    scores = [loudness_reward(dc(level), SR, "")["score"] for level in levels]
    assert scores[:2] == [1.0, 1.0]
    assert all(a > b for a, b in zip(scores[1:], scores[2:], strict=False)), scores


# --- the registry and the call shape -----------------------------------------------------


def test_signal_rewards_are_registered_by_name() -> None:
    assert AUDIO_SCORERS.keys() == ["clipping", "duration", "loudness", "silence"]
    assert AUDIO_SCORERS.get("duration") is duration_reward


def test_audio_registry_refuses_http_duplicates_and_explains_misses() -> None:
    registry = AudioScorerRegistry()
    registry.add("mine", silence_reward)
    with pytest.raises(ScorerRegistrationError, match="reserved for remote rewards"):
        registry.add("http", silence_reward)
    with pytest.raises(ScorerRegistrationError, match="Duplicate scorer for audio reward name 'mine'"):
        registry.add("mine", loudness_reward)
    with pytest.raises(ScorerRegistrationError, match=r"scorer\(waveform, sample_rate, text"):
        registry.add("x", 3)  # type: ignore[arg-type]
    with pytest.raises(UnknownAudioRewardError, match="'nope'. Known: http, mine"):
        registry.get("nope")


def test_run_audio_scorer_checks_the_waveform_and_the_output() -> None:
    sample = SpeechSample(tone(1.0, amplitude=0.1), SR, "hello")
    assert run_audio_scorer(loudness_reward, sample)["score"] == 1.0
    with pytest.raises(ScorerOutputError, match="must be finite"):
        run_audio_scorer(lambda *args: math.nan, sample)
    with pytest.raises(InvalidWaveformError):
        run_audio_scorer(loudness_reward, SpeechSample(np.zeros(0, np.float32), SR, "hello"))


# --- the wire format ---------------------------------------------------------------------


def test_wav_round_trip_and_a_standard_reader() -> None:
    x = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 1.7, -3.0, 1e-6], np.float32)
    data = encode_wav_pcm16(x, 24000)
    decoded, rate = decode_wav_pcm16(data)
    assert rate == 24000
    expected = np.clip(x, -1, 1)  # beyond full scale is clipped, then 16-bit quantised
    np.testing.assert_allclose(decoded, expected, atol=0.5 / 32767)
    read, read_rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert read_rate == 24000 and soundfile.info(io.BytesIO(data)).subtype == "PCM_16"
    np.testing.assert_allclose(read, expected, atol=1.5 / 32768)
    with pytest.raises(InvalidWaveformError, match="NaN"):
        encode_wav_pcm16(np.array([np.nan], np.float32), SR)
    with pytest.raises(InvalidWaveformError, match="Not a readable WAV"):
        decode_wav_pcm16(b"RIFF....")


# --- WeightedAudioReward ---------------------------------------------------------------------


def raise_on_short(waveform, sample_rate, text, ground_truth=None) -> float:
    if waveform.size < sample_rate:
        raise RuntimeError("too short to judge")
    return 1.0


def nan_score(waveform, sample_rate, text, ground_truth=None) -> float:
    return math.nan


@pytest.fixture
def registry() -> AudioScorerRegistry:
    registry = AudioScorerRegistry()
    for name in AUDIO_SCORERS.keys():
        registry.add(name, AUDIO_SCORERS.get(name))
    registry.add("judge", raise_on_short)
    registry.add("broken", nan_score)
    return registry


def test_weighted_sum_with_each_reward_as_a_metric() -> None:
    reward = WeightedAudioReward(
        [
            {"name": "duration", "weight": 1.0, "units_per_s": 2.0},
            {"name": "silence", "weight": 0.5},
            {"name": "loudness", "weight": 0.0},
        ]
    )
    # 1.5 s of tone + 1.5 s of silence for 6 words at 2 words/s: duration exactly 3.0 s -> 1;
    # silence ratio 0.5 -> 5/7; loudness (weight 0) reported, not paid:
    # RMS = 0.5/√2 over half the time -> 20·log10(0.25) = -12.04 dB
    waveform = np.concatenate([tone(1.5), silence(1.5)])
    result = reward(waveform, SR, SIX_WORDS)
    assert result["score"] == pytest.approx(1.0 + 0.5 * 5 / 7)
    assert result["audio_reward/duration"] == 1.0
    assert result["audio_reward/silence"] == pytest.approx(5 / 7)
    assert result["audio_reward/silence/silence_ratio"] == 0.5
    assert result["audio_reward/loudness/rms_dbfs"] == pytest.approx(20 * math.log10(0.25), abs=1e-3)
    assert result["audio_reward/duration/expected_duration_s"] == 3.0
    assert reward.keys == ["duration", "silence", "loudness"]


def test_a_batch_counts_failures_per_sample_and_per_reward(
    registry: AudioScorerRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    reward = WeightedAudioReward(
        [{"name": "loudness", "weight": 1.0}, {"name": "judge", "weight": 2.0}], registry=registry
    )
    samples = [
        SpeechSample(tone(1.0, 0.1), SR, "a", data_source="tts"),
        SpeechSample(tone(0.5, 0.1), SR, "a", data_source="tts"),  # the judge raises
        SpeechSample(np.array([0.0, np.inf], np.float32), SR, "a", data_source="tts"),
        SpeechSample(dc(-6.0), SR, "a", data_source="tts"),
    ]
    # at WARNING: importing vLLM's server (its model_hosting_container_standards) sets the root logger to ERROR
    caplog.set_level("WARNING", logger="omni_rewards")
    result = reward.score_batch(samples)
    assert [o.status for o in result.outcomes] == ["ok", "error", "error", "ok"]
    # ok: 1·1 + 2·1 = 3 and 1·0.5 + 2·1 = 2.5; failures score 0 and are counted
    assert result.scores == [3.0, 0.0, 0.0, pytest.approx(2.5, abs=1e-5)]
    assert "audio reward 'judge' failed: RuntimeError: too short to judge" in result.outcomes[1].error
    assert result.outcomes[2].error.startswith("invalid waveform: The waveform has 1 NaN or inf")
    metrics = result.metrics
    assert metrics["reward/errors"] == 2 and metrics["reward/errors/tts"] == 2
    assert metrics["audio_reward/invalid_waveforms"] == 1
    assert metrics["audio_reward/judge/errors"] == 1 and metrics["audio_reward/loudness/errors"] == 0
    # a reward's mean is over the samples it scored (3 for loudness, 2 for the judge)
    assert metrics["audio_reward/loudness/mean"] == pytest.approx((1 + 1 + 0.5) / 3, abs=1e-5)
    assert metrics["audio_reward/judge/mean"] == 1.0
    assert metrics["reward/tts/audio_reward/judge/mean"] == 1.0  # over the ok samples
    assert len(result.errors) == 2 and "judge" in caplog.text


def test_a_failing_reward_fails_the_sample_not_the_sum(registry: AudioScorerRegistry) -> None:
    reward = WeightedAudioReward(
        [{"name": "silence", "weight": 1.0}, {"name": "broken", "weight": 0.1}], registry=registry
    )
    with pytest.raises(AudioRewardError, match="audio reward 'broken' failed: ScorerOutputError"):
        reward(tone(1.0), SR, "hello")
    [outcome] = reward.score_batch([SpeechSample(tone(1.0), SR, "hello")]).outcomes
    assert outcome.status == "error" and "must be finite" in (outcome.error or "")
    with pytest.raises(InvalidWaveformError):
        reward(np.zeros(0, np.float32), SR, "hello")


def test_specs_are_checked_all_at_once(registry: AudioScorerRegistry) -> None:
    specs = [
        "duration",
        {"name": "duraton", "weight": 1.0},
        {"name": "silence", "weight": -1.0},
        {"name": "clipping", "weight": math.nan},
        {"name": "loudness"},
        {"name": "duration", "weight": 1.0, "speed": 3},
        {"name": "http", "weight": 1.0},
        {"name": "http", "weight": 1.0, "url": "ftp://x", "label": "asr"},
        {"weight": 1.0},
        {"name": "silence", "weight": True, "label": "s2"},
    ]
    with pytest.raises(AudioRewardConfigError) as raised:
        WeightedAudioReward(specs, registry=registry)
    message = str(raised.value)
    assert "spec 0 must be a mapping" in message
    assert "No audio reward is named 'duraton'. Known: broken, clipping, duration, http" in message
    assert "spec 2 ('silence'): weight must be finite and >= 0, got -1.0" in message
    assert "spec 3 ('clipping'): weight must be finite and >= 0, got nan" in message
    assert "spec 4 ('loudness'): 'weight' is required" in message
    assert "'speed'; 'duration' takes: unit, units_per_s, tolerance, falloff" in message
    assert "spec 6 ('http'): " in message and "'url'" in message
    assert "spec 7 ('http'): Invalid HttpScorerConfig: url must be an http(s) URL" in message
    assert "spec 8: 'name' is required" in message
    assert "spec 9 ('silence'): weight must be a number, got True" in message


def test_a_parameter_value_out_of_range_fails_every_sample_it_touches() -> None:
    # Values are checked by the reward when called (names are checked at construction).
    reward = WeightedAudioReward([{"name": "silence", "weight": 1.0, "max_silence_ratio": 1.5}])
    result = reward.score_batch([SpeechSample(tone(1.0), SR, "a")] * 2)
    assert result.metrics["reward/errors"] == 2
    assert "max_silence_ratio must be in [0, 1), got 1.5" in (result.outcomes[0].error or "")


def test_labels_must_be_distinct_and_some_weight_positive() -> None:
    with pytest.raises(AudioRewardConfigError, match="reports as 'http', as spec 0 does"):
        WeightedAudioReward(
            [
                {"name": "http", "weight": 1.0, "url": "http://127.0.0.1:9/a"},
                {"name": "http", "weight": 1.0, "url": "http://127.0.0.1:9/b"},
            ]
        )
    with pytest.raises(AudioRewardConfigError, match="every weight is 0"):
        WeightedAudioReward([{"name": "silence", "weight": 0.0}])
    with pytest.raises(AudioRewardConfigError, match="give at least one spec"):
        WeightedAudioReward([])


def test_a_remote_reward_joins_the_sum(scoring_service) -> None:
    # The test service scores a speech sample with its duration in seconds (see conftest).
    specs = [
        {"name": "silence", "weight": 1.0},
        {"name": "http", "label": "asr", "weight": 0.5, "url": scoring_service.url,
         "backoff_s": 0.01, "max_retries": 1},
    ]
    with WeightedAudioReward(specs) as reward:
        assert reward(tone(2.0), SR, "one two", "one two") == {
            "score": 1.0 + 0.5 * 2.0,
            "audio_reward/silence": 1.0,
            "audio_reward/silence/silence_ratio": 0.0,
            "audio_reward/asr": 2.0,
            "audio_reward/asr/peak": pytest.approx(0.5, abs=2 / 32768),
            "audio_reward/asr/words": 2.0,
            "audio_reward/asr/has_ground_truth": 1.0,
            "audio_reward/asr/sample_rate_matches": 1.0,
        }
        scoring_service.fail_next = [503, 503]  # both attempts fail: every sample fails
        result = reward.score_batch([SpeechSample(tone(1.0), SR, "a")] * 3)
    assert [o.status for o in result.outcomes] == ["error"] * 3
    assert result.metrics["audio_reward/asr/errors"] == 3
    assert result.metrics["audio_reward/silence/errors"] == 0
    assert "failed 2 times; last error: HTTP 503" in (result.outcomes[0].error or "")
