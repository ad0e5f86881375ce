// The login page: POST /api/login, then the console.
const form = document.getElementById("login-form");
const error = document.getElementById("login-error");

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.textContent = "";
  const body = {
    name: document.getElementById("name").value.trim(),
    password: document.getElementById("password").value,
  };
  try {
    const response = await fetch("/api/login", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      credentials: "same-origin",
    });
    if (response.ok) {
      location.replace("/");
      return;
    }
    const detail = (await response.json().catch(() => ({}))).detail;
    error.textContent = detail || `login failed (${response.status})`;
  } catch (err) {
    error.textContent = "the console does not answer; is it running?";
  }
});
