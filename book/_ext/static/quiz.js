// The {quiz} directive's buttons: a pick shows its feedback, marked right or wrong.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".quiz").forEach(function (quiz) {
    var live = quiz.querySelector(".quiz-feedback");
    quiz.querySelectorAll(".quiz-choice").forEach(function (choice) {
      var button = choice.querySelector(".quiz-button");
      button.addEventListener("click", function () {
        quiz.querySelectorAll(".quiz-button").forEach(function (b) {
          b.setAttribute("aria-pressed", "false");
        });
        quiz.querySelectorAll(".quiz-choice").forEach(function (c) {
          c.classList.remove("quiz-right", "quiz-wrong");
        });
        var right = choice.dataset.correct === "true";
        button.setAttribute("aria-pressed", "true");
        choice.classList.add(right ? "quiz-right" : "quiz-wrong");
        var verdict = right ? quiz.dataset.right || "Right." : quiz.dataset.wrong || "Not quite.";
        live.innerHTML = "<p class='quiz-verdict'></p>" +
          choice.querySelector(".quiz-choice-feedback").innerHTML;
        live.querySelector(".quiz-verdict").textContent = verdict;
        live.className = "quiz-feedback " + (right ? "quiz-right" : "quiz-wrong");
      });
    });
  });
});
